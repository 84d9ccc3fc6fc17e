package twilio_test

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"smsgw/internal/provider/twilio"
)

// TestInboundReplyTo: an incoming message names our number (To) and the
// messaging service it came through (MessagingServiceSid), where a reply
// is routed; the default sender is From, else the messaging service.
func TestInboundReplyTo(t *testing.T) {
	const token, public = "tok-123", "https://sms.example.com/v1/inbound/twilio"
	p := signedWith(t, token, twilio.Config{InboundURL: public})
	const sid, svc = "SM0123456789abcdef0123456789abcdef", "MG0123456789abcdef0123456789abcdef"
	form := url.Values{"MessageSid": {sid}, "AccountSid": {"AC11111111111111111111111111111111"}, "From": {"+14155550100"},
		"To": {"+15005550006"}, "MessagingServiceSid": {svc}, "Body": {"See you at 3"}}
	r := httptest.NewRequestWithContext(t.Context(), "POST", public, strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set(twilio.HeaderSignature, twilio.Signature(token, public, form))
	in, err := p.ParseInbound(r, []byte(form.Encode()))
	if err != nil || in.To != "+15005550006" || in.Service != svc || in.Text != "See you at 3" {
		t.Fatalf("inbound %+v, %v; want To and Service read", in, err)
	}
	if s := p.DefaultSender(); s != "ACME" {
		t.Errorf("DefaultSender = %q, want the configured from", s)
	}
	svcOnly, err := twilio.New(twilio.Config{Settings: twilio.Settings{AccountSID: "AC11111111111111111111111111111111",
		AuthToken: token, MessagingServiceSID: svc}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svcOnly.CloseIdleConnections)
	if s := svcOnly.DefaultSender(); s != svc {
		t.Errorf("DefaultSender without from = %q, want the messaging service", s)
	}
}
