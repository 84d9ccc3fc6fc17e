package twilio_test

import (
	"errors"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"smsgw/internal/provider"
	"smsgw/internal/provider/twilio"
	"smsgw/internal/sms"
)

// signedWith is the adapter with cfg on account AC1111… whose auth token,
// the key of the webhooks' signatures, is token.
func signedWith(t *testing.T, token string, cfg twilio.Config) *twilio.Provider {
	t.Helper()
	cfg.Settings = twilio.Settings{AccountSID: "AC11111111111111111111111111111111", AuthToken: token, From: "ACME"}
	p, err := twilio.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.CloseIdleConnections)
	return p
}

// TestSignatureVector: Twilio's documented example (auth token 12345).
func TestSignatureVector(t *testing.T) {
	params := url.Values{"CallSid": {"CA1234567890ABCDE"}, "Caller": {"+12349013030"}, "Digits": {"1234"},
		"From": {"+12349013030"}, "To": {"+18005551212"}}
	if got := twilio.Signature("12345", "https://mycompany.com/myapp.php?foo=1&bar=2", params); got != "0/KCTR6DLpKmkAf8muzZqo1nDgQ=" {
		t.Fatalf("signature %q", got)
	}
}

func TestParseReceipt(t *testing.T) {
	const token = "tok-123"
	// Behind a proxy: Twilio calls the public URL, we see another host.
	public := "https://sms.example.com/v1/receipts/twilio"
	p := signedWith(t, token, twilio.Config{StatusCallback: public})
	query := "smsgw_ref=" + url.QueryEscape("msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA")
	form := url.Values{"MessageSid": {"SM1"}, "MessageStatus": {"undelivered"}, "ErrorCode": {"30005"}, "AccountSid": {"AC11111111111111111111111111111111"}}
	request := func(sig string, body string) (provider.Receipt, error) {
		r := httptest.NewRequestWithContext(t.Context(), "POST", "http://10.0.0.7:8080/v1/receipts/twilio?"+query, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if sig != "" {
			r.Header.Set(twilio.HeaderSignature, sig)
		}
		return p.ParseReceipt(r, []byte(body))
	}
	good := twilio.Signature(token, public+"?"+query, form)
	rc, err := request(good, form.Encode())
	if err != nil {
		t.Fatal(err)
	}
	want := provider.Receipt{ProviderID: "SM1", Reference: "msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA", Status: sms.StatusUndelivered,
		VendorStatus: "undelivered", ErrorCode: "30005"}
	if rc != want {
		t.Fatalf("receipt %+v, want %+v", rc, want)
	}
	tampered := url.Values{"MessageSid": {"SM1"}, "MessageStatus": {"delivered"}, "ErrorCode": {"30005"}, "AccountSid": {"AC11111111111111111111111111111111"}}
	for name, c := range map[string][2]string{
		"missing":      {"", form.Encode()},
		"tampered":     {good, tampered.Encode()},
		"other token":  {twilio.Signature("other", public+"?"+query, form), form.Encode()},
		"internal url": {twilio.Signature(token, "http://10.0.0.7:8080/v1/receipts/twilio?"+query, form), form.Encode()},
	} {
		if _, err := request(c[0], c[1]); !errors.Is(err, provider.ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
	// A status on the way changes nothing.
	sent := url.Values{"MessageSid": {"SM1"}, "MessageStatus": {"sent"}}
	rc, err = request(twilio.Signature(token, public+"?"+query, sent), sent.Encode())
	if err != nil || rc.Status != "" || rc.VendorStatus != "other" {
		t.Fatalf("sent: %+v, %v", rc, err)
	}
}
