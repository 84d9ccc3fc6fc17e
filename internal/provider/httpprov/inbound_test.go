package httpprov_test

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"smsgw/internal/provider"
	"smsgw/internal/provider/httpprov"
)

// TestParseInbound: a generic inbound message signed with the receipt
// secret is read; a missing or wrong signature, a receipt's header, or no
// secret at all is refused; a malformed one names its field.
func TestParseInbound(t *testing.T) {
	p, err := httpprov.New(httpprov.Config{URL: "http://127.0.0.1:1/send", ReceiptSecret: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"from":"+819012345678","to":"ACME","text":" STOP ","at":"2026-11-30T20:00:00Z"}`
	parse := func(p *httpprov.Provider, header, sig, body string) (provider.Inbound, error) {
		r := httptest.NewRequestWithContext(t.Context(), "POST", "/v1/inbound/http", strings.NewReader(body))
		if sig != "" {
			r.Header.Set(header, sig)
		}
		return p.ParseInbound(r, []byte(body))
	}
	in, err := parse(p, httpprov.HeaderInboundSignature, httpprov.SignInbound("s3cret", []byte(body)), body)
	if err != nil {
		t.Fatal(err)
	}
	if want := (provider.Inbound{From: "+819012345678", FromField: "from", Text: " STOP "}); in != want {
		t.Fatalf("inbound %+v, want %+v", in, want)
	}
	for name, c := range map[string][2]string{
		"missing":        {httpprov.HeaderInboundSignature, ""},
		"other key":      {httpprov.HeaderInboundSignature, httpprov.SignInbound("other", []byte(body))},
		"other body":     {httpprov.HeaderInboundSignature, httpprov.SignInbound("s3cret", []byte(body+" "))},
		"receipt header": {httpprov.HeaderReceiptSignature, httpprov.SignReceipt("s3cret", []byte(body))},
	} {
		if _, err := parse(p, c[0], c[1], body); !errors.Is(err, provider.ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
	var re *provider.ReceiptError
	for field, bad := range map[string]string{"from": `{"text":"STOP"}`, "body": `STOP`} {
		if _, err := parse(p, httpprov.HeaderInboundSignature, httpprov.SignInbound("s3cret", []byte(bad)), bad); !errors.As(err, &re) || re.Field != field {
			t.Errorf("%s: %v, want a problem naming %s", bad, err, field)
		}
	}
	q, _ := httpprov.New(httpprov.Config{URL: "http://127.0.0.1:1/send"})
	if _, err := parse(q, httpprov.HeaderInboundSignature, httpprov.SignInbound("", []byte(body)), body); !errors.Is(err, provider.ErrBadSignature) {
		t.Errorf("no secret: %v", err)
	}
	// While receipt_secret is rotated, an inbound message signed with the
	// secret it replaces is taken, as a receipt is; any other is not.
	rot, err := httpprov.New(httpprov.Config{URL: "http://127.0.0.1:1/send", ReceiptSecret: "n3w-secret", PreviousReceiptSecret: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"n3w-secret", "s3cret"} {
		if _, err := parse(rot, httpprov.HeaderInboundSignature, httpprov.SignInbound(secret, []byte(body)), body); err != nil {
			t.Errorf("rotating, signed with %s: %v", secret, err)
		}
	}
	if _, err := parse(rot, httpprov.HeaderInboundSignature, httpprov.SignInbound("other", []byte(body)), body); !errors.Is(err, provider.ErrBadSignature) {
		t.Errorf("rotating, another secret: %v, want ErrBadSignature", err)
	}
}
