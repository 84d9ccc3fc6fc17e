package twilio_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
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

// A failed send's debug line carries the vendor's text scrubbed like every
// other provider text (docs/design.md section 6): Twilio's 21211 quotes the
// number it refused and a vendor may quote the body; neither may reach the
// log.
func TestFailureLogScrubbed(t *testing.T) {
	t.Parallel()
	const to, body = "+819012345678", "Your code is 482913, do not share it"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusBadRequest, 21211, "The 'To' number "+to+" is not a valid phone number. Body: "+body)
	}))
	defer srv.Close()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := twilio.New(twilio.Config{BaseURL: srv.URL, Logger: log,
		Settings: twilio.Settings{AccountSID: accountSID, AuthToken: authToken, From: "ACME"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.CloseIdleConnections()
	_, err = p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: to, Body: body})
	if pe := provider.AsError(err); pe == nil || pe.Reason != provider.ReasonRejected {
		t.Fatalf("got %v, want a rejection", err)
	}
	out := buf.String()
	if !strings.Contains(out, "provider send failed") {
		t.Fatalf("no failure line: %s", out)
	}
	for _, leak := range []string{to, "9012345678", body, "482913", authToken} {
		if strings.Contains(out, leak) {
			t.Errorf("log carries %q: %s", leak, out)
		}
	}
}

// Twilio drops the username and password of a callback URL before it
// signs (and, over https, may or may not keep the port): a StatusCallback
// with credentials in it, or with an explicit default port, must still
// verify, as Twilio's own validators accept both forms. A URL Twilio was
// not given (another host, another path) still fails.
func TestReceiptSignedURLForms(t *testing.T) {
	t.Parallel()
	const token = "tok-123"
	query := "smsgw_ref=" + url.QueryEscape("msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA")
	form := url.Values{"MessageSid": {"SM1"}, "MessageStatus": {"delivered"}, "AccountSid": {"AC11111111111111111111111111111111"}}
	for _, tc := range []struct {
		configured string   // provider.receipt_url
		signed     []string // URLs Twilio may have signed (without the query)
		refused    []string
	}{
		{"https://hook:pa55@sms.example.com/v1/receipts/twilio",
			[]string{"https://sms.example.com/v1/receipts/twilio", "https://sms.example.com:443/v1/receipts/twilio"},
			[]string{"https://other.example.com/v1/receipts/twilio", "https://sms.example.com/v1/receipts/other"}},
		{"https://sms.example.com:443/v1/receipts/twilio",
			[]string{"https://sms.example.com:443/v1/receipts/twilio", "https://sms.example.com/v1/receipts/twilio"},
			[]string{"https://sms.example.com:8443/v1/receipts/twilio"}},
		{"https://sms.example.com:8443/v1/receipts/twilio",
			[]string{"https://sms.example.com:8443/v1/receipts/twilio", "https://sms.example.com/v1/receipts/twilio"},
			[]string{"https://sms.example.com:443/v1/receipts/twilio"}},
		{"http://u:p@sms.example.com:8080/v1/receipts/twilio",
			[]string{"http://sms.example.com:8080/v1/receipts/twilio"},
			[]string{"http://sms.example.com/v1/receipts/twilio", "http://sms.example.com:8081/v1/receipts/twilio"}},
	} {
		p := signedWith(t, token, twilio.Config{StatusCallback: tc.configured})
		check := func(signedURL string) error {
			body := form.Encode()
			r := httptest.NewRequestWithContext(t.Context(), "POST", "http://10.0.0.7:8080/v1/receipts/twilio?"+query, strings.NewReader(body))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.Header.Set(twilio.HeaderSignature, twilio.Signature(token, signedURL+"?"+query, form))
			_, err := p.ParseReceipt(r, []byte(body))
			return err
		}
		for _, u := range tc.signed {
			if err := check(u); err != nil {
				t.Errorf("configured %s, signed over %s: %v, want accepted", tc.configured, u, err)
			}
		}
		for _, u := range tc.refused {
			if err := check(u); !errors.Is(err, provider.ErrBadSignature) {
				t.Errorf("configured %s, signed over %s: %v, want ErrBadSignature", tc.configured, u, err)
			}
		}
		p.CloseIdleConnections()
	}
}

// What a refusal keeps (the error's text, which becomes last_error, a dead
// letter's reason, a callback's error) is the code and the gateway's fixed
// text for it, never Twilio's message: an echo of the body cut short, or
// re-encoded, passes any scrub. A code the adapter does not know keeps a
// generic fixed text.
func TestRefusalKeepsFixedText(t *testing.T) {
	t.Parallel()
	const to, body = "+819012345678", "Your login code is 482913. Never share it with anyone, including us."
	for _, tc := range []struct {
		code int
		echo string
		want string
	}{
		{21617, "Body too long: 'Your login code is 48291…'", "twilio 21617: the message body is too long"},
		{21211, "Invalid To: %2B81%2090%201234%205678 (Your%20login%20code)", "twilio 21211: invalid To number"},
		{39999, "Y o u r  l o g i n  c o d e  i s  4 8 2 9 1 3", "twilio 39999: error code not known to the gateway"},
		{0, "Your login code is 482913", "Bad Request"},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusBadRequest, tc.code, tc.echo)
		}))
		p, err := twilio.New(twilio.Config{BaseURL: srv.URL,
			Settings: twilio.Settings{AccountSID: accountSID, AuthToken: authToken, From: "ACME"}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: to, Body: body})
		p.CloseIdleConnections()
		srv.Close()
		pe := provider.AsError(provider.Scrubbed(err, body))
		if pe == nil || pe.Message != tc.want {
			t.Errorf("code %d: kept %v, want the text %q", tc.code, err, tc.want)
		}
	}
}

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
