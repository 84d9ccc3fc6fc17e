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

// TestParseInbound: an incoming message signed over provider.inbound_url
// (behind a proxy: the public URL, not the one the gateway sees) is read;
// a missing, tampered, wrongly keyed or receipt-URL signature is refused;
// without an inbound URL every message is refused; a message without From
// is a problem naming From. The answer is an empty TwiML document.
func TestParseInbound(t *testing.T) {
	const token = "tok-123"
	public := "https://sms.example.com/v1/inbound/twilio"
	receipts := "https://sms.example.com/v1/receipts/twilio"
	p := signedWith(t, token, twilio.Config{StatusCallback: receipts, InboundURL: public})
	const sid = "SM0123456789abcdef0123456789abcdef"
	form := url.Values{"MessageSid": {sid}, "SmsSid": {sid}, "AccountSid": {"AC11111111111111111111111111111111"}, "From": {"+14155550100"},
		"To": {"+15005550006"}, "Body": {"Stop"}, "NumMedia": {"0"}}
	parse := func(p *twilio.Provider, sig string, form url.Values) (provider.Inbound, error) {
		body := form.Encode()
		r := httptest.NewRequestWithContext(t.Context(), "POST", "http://10.0.0.7:8080/v1/inbound/twilio", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if sig != "" {
			r.Header.Set(twilio.HeaderSignature, sig)
		}
		return p.ParseInbound(r, []byte(body))
	}
	in, err := parse(p, twilio.Signature(token, public, form), form)
	if err != nil {
		t.Fatal(err)
	}
	if want := (provider.Inbound{From: "+14155550100", FromField: "From", To: "+15005550006", Text: "Stop", ProviderID: sid}); in != want {
		t.Fatalf("inbound %+v, want %+v", in, want)
	}
	tampered := url.Values{}
	for k, v := range form {
		tampered[k] = v
	}
	tampered.Set("From", "+14155550199")
	for name, c := range map[string]struct {
		sig  string
		form url.Values
	}{
		"missing":      {"", form},
		"tampered":     {twilio.Signature(token, public, form), tampered},
		"other token":  {twilio.Signature("other", public, form), form},
		"receipt url":  {twilio.Signature(token, receipts, form), form},
		"internal url": {twilio.Signature(token, "http://10.0.0.7:8080/v1/inbound/twilio", form), form},
	} {
		if _, err := parse(p, c.sig, c.form); !errors.Is(err, provider.ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
	var re *provider.ReceiptError
	// A real request's optional parameters pass.
	full := url.Values{}
	for k, v := range form {
		full[k] = v
	}
	for k, v := range map[string]string{"SmsMessageSid": sid, "MessagingServiceSid": "MG0123456789abcdef0123456789abcdef",
		"NumSegments": "1", "ApiVersion": "2010-04-01", "SmsStatus": "received", "OptOutType": "STOP", "FromCity": "SAN FRANCISCO",
		"FromState": "CA", "FromZip": "94105", "FromCountry": "US", "ToCity": "", "ToState": "", "ToZip": "", "ToCountry": "US",
		"MediaUrl0": "https://api.twilio.com/m/1", "MediaContentType0": "image/jpeg"} {
		full.Set(k, v)
	}
	if _, err := parse(p, twilio.Signature(token, public, full), full); err != nil {
		t.Errorf("a request with Twilio's optional parameters: %v", err)
	}
	// Signed, but not as Twilio sends it: each is a problem naming the
	// parameter, nothing in it is read.
	for field, edit := range map[string]func(url.Values){
		"From":       func(f url.Values) { f.Add("From", "+14155550199") },
		"Body":       func(f url.Values) { f["Body"] = []string{"START", "Stop"} },
		"Evil":       func(f url.Values) { f.Set("Evil", "x") },
		"AccountSid": func(f url.Values) { f.Set("AccountSid", "AC2") },
		"MessageSid": func(f url.Values) { f.Set("MessageSid", "SM1"); f.Del("SmsSid") },
		"SmsSid":     func(f url.Values) { f.Set("SmsSid", "SM0123456789abcdef0123456789abcdee") },
	} {
		f := url.Values{}
		for k, v := range form {
			f[k] = append([]string(nil), v...)
		}
		edit(f)
		if _, err := parse(p, twilio.Signature(token, public, f), f); !errors.As(err, &re) || re.Field != field {
			t.Errorf("%s: %v, want a problem naming it", field, err)
		}
	}
	noFrom := url.Values{"MessageSid": {sid}, "AccountSid": {"AC11111111111111111111111111111111"}, "Body": {"STOP"}}
	if _, err := parse(p, twilio.Signature(token, public, noFrom), noFrom); !errors.As(err, &re) || re.Field != "From" {
		t.Errorf("no From: %v, want a problem naming From", err)
	}
	// Without provider.inbound_url nothing is believed, not even a message
	// signed over the receipts' URL.
	q := signedWith(t, token, twilio.Config{StatusCallback: receipts})
	if _, err := parse(q, twilio.Signature(token, receipts, form), form); !errors.Is(err, provider.ErrBadSignature) {
		t.Errorf("no inbound URL: %v, want ErrBadSignature", err)
	}
	ct, body := p.InboundAck()
	if ct != "text/xml" || string(body) != `<?xml version="1.0" encoding="UTF-8"?><Response/>` {
		t.Errorf("ack %s %s, want an empty TwiML Response", ct, body)
	}
	if _, err := twilio.New(twilio.Config{Settings: twilio.Settings{AccountSID: "AC11111111111111111111111111111111", AuthToken: token, From: "ACME"},
		InboundURL: "not a url"}); err == nil || !strings.Contains(err.Error(), "inbound_url") {
		t.Errorf("a bad inbound URL: %v, want an error naming inbound_url", err)
	}
}

// OptOutType, Twilio's own reading of the text, is the message's Keyword:
// STOP an opt-out, START an opt-in; HELP, absent or unknown, none.
func TestParseInboundOptOutType(t *testing.T) {
	const token = "tok-123"
	public := "https://sms.example.com/v1/inbound/twilio"
	p := signedWith(t, token, twilio.Config{InboundURL: public})
	for optOutType, want := range map[string]string{"STOP": provider.KeywordOptOut, "START": provider.KeywordOptIn, "HELP": "", "": "", "stop": ""} {
		form := url.Values{"MessageSid": {"SM0123456789abcdef0123456789abcdef"}, "AccountSid": {"AC11111111111111111111111111111111"},
			"From": {"+14155550100"}, "To": {"+15005550006"}, "Body": {"ARRET"}}
		if optOutType != "" {
			form.Set("OptOutType", optOutType)
		}
		body := form.Encode()
		r := httptest.NewRequestWithContext(t.Context(), "POST", "http://10.0.0.7:8080/v1/inbound/twilio", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set(twilio.HeaderSignature, twilio.Signature(token, public, form))
		in, err := p.ParseInbound(r, []byte(body))
		if err != nil {
			t.Fatalf("OptOutType %q: %v", optOutType, err)
		}
		if in.Keyword != want || in.Text != "ARRET" {
			t.Errorf("OptOutType %q: keyword %q, text %q; want %q", optOutType, in.Keyword, in.Text, want)
		}
	}
}

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
