package gateway

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"smsgw/internal/config"
	"smsgw/internal/provider/twilio"
)

// TestReceiptsPauseASenderOrTheAccount: a Twilio StatusCallback with error
// 30001 (a sender's queue overflowed) pauses that sender alone, through
// the same path a send's answer takes, and the account keeps sending; one
// with 30002 (account suspended) pauses the account. Both are counted for
// the alerts.
func TestReceiptsPauseASenderOrTheAccount(t *testing.T) {
	const token = "twilio-auth-token-0123"
	const public = "https://sms.example.com/v1/receipts/twilio"
	fake := &fakeTwilio{callbacks: map[string]string{}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	h := start(t, embeddedMode, func(c *config.Config) {
		c.Provider.Kind = "twilio"
		c.Provider.HTTP.URL = srv.URL
		c.Provider.ReceiptURL = public
		c.Provider.Twilio = twilio.Settings{AccountSID: "AC0123456789abcdef0123456789abcdef", AuthToken: token, From: "+15005550006"}
		c.Limits.Senders = map[string]config.SenderLimits{"+15005550009": {MaxRPS: 1}}
	})
	v := h.sendAndWait(t)
	fake.mu.Lock()
	callback := fake.callbacks[v.ProviderMessageID]
	fake.mu.Unlock()
	u, err := url.Parse(callback)
	if err != nil {
		t.Fatal(err)
	}
	receipt := func(code, from string) {
		t.Helper()
		form := url.Values{"MessageSid": {v.ProviderMessageID}, "MessageStatus": {"failed"}, "ErrorCode": {code},
			"From": {from}, "AccountSid": {"AC0123456789abcdef0123456789abcdef"}}
		wantStatus(t, h.do(req{method: http.MethodPost, path: "/v1/receipts/twilio?" + u.RawQuery, body: form.Encode(),
			header: map[string]string{"Content-Type": "application/x-www-form-urlencoded",
				twilio.HeaderSignature: twilio.Signature(token, callback, form)}}), http.StatusNoContent)
	}
	receipt("30001", "+15005550009")
	m := metricValues(string(h.get("/metrics", "").body), "smsgw_dispatch_reported_pauses_total", "smsgw_dispatch_sender_pause_remaining_seconds")
	if m[`smsgw_dispatch_reported_pauses_total{scope="sender"}`] != 1 || m[`smsgw_dispatch_reported_pauses_total{scope="account"}`] != 0 {
		t.Errorf("after 30001: %v, want one sender pause", m)
	}
	if left := m[`smsgw_dispatch_sender_pause_remaining_seconds{sender="+15005550009"}`]; left < twilio.QueueFullPause.Seconds()-60 {
		t.Errorf("the sender's pause is %v s, want about %v", left, twilio.QueueFullPause.Seconds())
	}
	h.sendAndWait(t) // the account's own sender still sends
	receipt("30002", "+15005550006")
	m = metricValues(string(h.get("/metrics", "").body), "smsgw_dispatch_reported_pauses_total")
	if m[`smsgw_dispatch_reported_pauses_total{scope="account"}`] != 1 {
		t.Errorf("after 30002: %v, want one account pause", m)
	}
	// Every send now waits: an OTP is refused at once.
	wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusServiceUnavailable)
}
