package httpprov_test

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"smsgw/internal/provider"
	"smsgw/internal/provider/httpprov"
	"smsgw/internal/sms"
)

func TestParseReceipt(t *testing.T) {
	p, err := httpprov.New(httpprov.Config{URL: "http://127.0.0.1:1/send", ReceiptSecret: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"provider_message_id":"pm-1","reference":"msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA","status":"delivered","at":"2026-11-30T20:00:00Z"}`
	parse := func(sig, body string) (provider.Receipt, error) {
		r := httptest.NewRequestWithContext(t.Context(), "POST", "/v1/receipts/http", strings.NewReader(body))
		if sig != "" {
			r.Header.Set(httpprov.HeaderReceiptSignature, sig)
		}
		return p.ParseReceipt(r, []byte(body))
	}
	rc, err := parse(httpprov.SignReceipt("s3cret", []byte(body)), body)
	if err != nil {
		t.Fatal(err)
	}
	if rc.ProviderID != "pm-1" || rc.Status != sms.StatusDelivered || rc.Reference != "msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA" || rc.At.IsZero() {
		t.Fatalf("receipt %+v", rc)
	}
	for name, sig := range map[string]string{
		"missing":    "",
		"other key":  httpprov.SignReceipt("other", []byte(body)),
		"no prefix":  strings.TrimPrefix(httpprov.SignReceipt("s3cret", []byte(body)), "sha256="),
		"other body": httpprov.SignReceipt("s3cret", []byte(body+" ")),
	} {
		if _, err := parse(sig, body); !errors.Is(err, provider.ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
	bad := `{"provider_message_id":"pm-1","status":"read"}`
	var re *provider.ReceiptError
	if _, err := parse(httpprov.SignReceipt("s3cret", []byte(bad)), bad); !errors.As(err, &re) || re.Field != "status" {
		t.Errorf("bad status: %v", err)
	}
	// No secret configured: every receipt is refused.
	q, _ := httpprov.New(httpprov.Config{URL: "http://127.0.0.1:1/send"})
	r := httptest.NewRequestWithContext(t.Context(), "POST", "/v1/receipts/http", strings.NewReader(body))
	r.Header.Set(httpprov.HeaderReceiptSignature, httpprov.SignReceipt("", []byte(body)))
	if _, err := q.ParseReceipt(r, []byte(body)); !errors.Is(err, provider.ErrBadSignature) {
		t.Errorf("no secret: %v", err)
	}
}

// While the receipt secret is rotated (PreviousReceiptSecret) a receipt
// signed with either secret is taken and says which one signed it, also
// when its body is malformed; one signed with any other secret is
// refused. A previous secret alone checks nothing.
func TestParseReceiptPreviousSecret(t *testing.T) {
	const current, previous = "receipt-secret-new", "receipt-secret-old"
	p, err := httpprov.New(httpprov.Config{URL: "http://127.0.0.1:1/send", ReceiptSecret: current, PreviousReceiptSecret: previous})
	if err != nil {
		t.Fatal(err)
	}
	parse := func(p *httpprov.Provider, secret, body string) (provider.Receipt, error) {
		r := httptest.NewRequestWithContext(t.Context(), "POST", "/v1/receipts/http", strings.NewReader(body))
		r.Header.Set(httpprov.HeaderReceiptSignature, httpprov.SignReceipt(secret, []byte(body)))
		return p.ParseReceipt(r, []byte(body))
	}
	body := `{"provider_message_id":"pm-1","status":"delivered"}`
	for _, c := range []struct {
		secret   string
		previous bool
	}{{current, false}, {previous, true}} {
		rc, err := parse(p, c.secret, body)
		if err != nil || rc.ProviderID != "pm-1" || rc.Status != sms.StatusDelivered || rc.PreviousSecret != c.previous {
			t.Errorf("signed with the %s secret: %+v, %v; want delivered, PreviousSecret %v", c.secret, rc, err, c.previous)
		}
	}
	for _, other := range []string{"", "another-secret", previous + " ", current[:len(current)-1]} {
		if _, err := parse(p, other, body); !errors.Is(err, provider.ErrBadSignature) {
			t.Errorf("signed with %q: %v, want ErrBadSignature", other, err)
		}
	}
	bad := `{"provider_message_id":"pm-1","status":"read"}`
	var re *provider.ReceiptError
	if rc, err := parse(p, previous, bad); !errors.As(err, &re) || !rc.PreviousSecret {
		t.Errorf("malformed, signed with the previous secret: %+v, %v; want a ReceiptError that says the previous secret signed it", rc, err)
	}
	alone, err := httpprov.New(httpprov.Config{URL: "http://127.0.0.1:1/send", PreviousReceiptSecret: previous})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parse(alone, previous, body); !errors.Is(err, provider.ErrBadSignature) {
		t.Errorf("previous secret without a current one: %v, want ErrBadSignature", err)
	}
}
