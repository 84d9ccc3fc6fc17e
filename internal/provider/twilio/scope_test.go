package twilio_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/provider/twilio"
	"smsgw/internal/sms"
)

// TestAnswerScopes: every answer says whose it is. A sender's queue full
// and the 2024 "From" codes are the sender's (its lane pauses); our
// refused StatusCallback and a throttle are the account's; a bad number
// is the message's.
func TestAnswerScopes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status, code int
		reason       provider.Reason
		scope        provider.Scope
	}{
		{http.StatusBadRequest, 21611, provider.ReasonQueueFull, provider.ScopeSender},
		{http.StatusBadRequest, 21659, provider.ReasonSetup, provider.ScopeSender},
		{http.StatusBadRequest, 21660, provider.ReasonSetup, provider.ScopeSender},
		{http.StatusBadRequest, 21661, provider.ReasonSetup, provider.ScopeSender},
		{http.StatusBadRequest, 21609, provider.ReasonSetup, provider.ScopeAccount},
		{http.StatusTooManyRequests, 20429, provider.ReasonThrottled, provider.ScopeAccount},
		{http.StatusBadRequest, 21211, provider.ReasonRejected, provider.ScopeMessage},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeError(w, tc.status, tc.code, "x")
		}))
		p, err := twilio.New(twilio.Config{BaseURL: srv.URL, Settings: twilio.Settings{AccountSID: accountSID, AuthToken: authToken, From: "+15005550006"}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", From: "Mkt1", Body: "hi"})
		if pe := provider.AsError(err); pe == nil || pe.Reason != tc.reason || pe.ScopeOf() != tc.scope || pe.Temporary && tc.reason == provider.ReasonSetup {
			t.Errorf("%d/%d: got %+v, want %s of scope %s", tc.status, tc.code, pe, tc.reason, tc.scope)
		}
		p.CloseIdleConnections()
		srv.Close()
	}
}

// TestReceiptScopes: a receipt's 30001 pauses the sender it names (the
// account's own sender or Messaging Service is the lane ""); 30002 and
// 63038 pause the account; any other code says nothing beyond its message.
func TestReceiptScopes(t *testing.T) {
	t.Parallel()
	const token = "tok-123"
	public := "https://sms.example.com/v1/receipts/twilio"
	p := signedWith(t, token, twilio.Config{StatusCallback: public})
	const service = "MG0123456789abcdef0123456789abcdef"
	ps, err := twilio.New(twilio.Config{StatusCallback: public, Settings: twilio.Settings{
		AccountSID: "AC11111111111111111111111111111111", AuthToken: token, MessagingServiceSID: service}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ps.CloseIdleConnections)
	for _, tc := range []struct {
		name     string
		p        *twilio.Provider
		form     url.Values
		reason   provider.Reason // "": nothing said
		scope    provider.Scope
		sender   string
		untilMin time.Duration
	}{
		{"queue overflow of a sender", p, url.Values{"ErrorCode": {"30001"}, "From": {"+15550100"}}, provider.ReasonQueueFull, provider.ScopeSender, "+15550100", twilio.QueueFullPause},
		{"queue overflow of the account's sender", p, url.Values{"ErrorCode": {"30001"}, "From": {"ACME"}}, provider.ReasonQueueFull, provider.ScopeSender, "", twilio.QueueFullPause},
		{"queue overflow of the account's service", ps, url.Values{"ErrorCode": {"30001"}, "From": {"+15550100"}, "MessagingServiceSid": {service}}, provider.ReasonQueueFull, provider.ScopeSender, "", twilio.QueueFullPause},
		{"account suspended", p, url.Values{"ErrorCode": {"30002"}}, provider.ReasonSuspended, provider.ScopeAccount, "", time.Second},
		{"daily limit", p, url.Values{"ErrorCode": {"63038"}}, provider.ReasonSuspended, provider.ScopeAccount, "", time.Second},
		{"unreachable handset", p, url.Values{"ErrorCode": {"30003"}}, "", "", "", 0},
	} {
		form := tc.form
		form.Set("MessageSid", "SM1")
		form.Set("MessageStatus", "failed")
		body := form.Encode()
		r := httptest.NewRequestWithContext(t.Context(), "POST", public, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set(twilio.HeaderSignature, twilio.Signature(token, public, form))
		rc, err := tc.p.ParseReceipt(r, []byte(body))
		switch {
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.reason == "" && rc.Said != nil:
			t.Errorf("%s: said %+v, want nothing", tc.name, rc.Said)
		case tc.reason != "" && (rc.Said == nil || rc.Said.Reason != tc.reason || rc.Said.ScopeOf() != tc.scope ||
			rc.Sender != tc.sender || rc.Said.RetryAfter < tc.untilMin):
			t.Errorf("%s: said %+v for sender %q, want %s of scope %s for %q", tc.name, rc.Said, rc.Sender, tc.reason, tc.scope, tc.sender)
		}
	}
}
