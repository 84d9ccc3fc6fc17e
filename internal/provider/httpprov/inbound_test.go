package httpprov_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/provider/httpprov"
)

// TestParseInbound: a generic inbound message signed with the receipt
// secret is read, known by its id or its signed body's hash; a missing or
// wrong signature, a receipt's header, a receipt's signature of the same
// bytes, or no secret at all is refused; a signed time missing or outside
// the window is refused as stale (a START dated seven days back); an
// unknown or repeated member, or a malformed one, names its field.
func TestParseInbound(t *testing.T) {
	now := time.Date(2026, 11, 30, 20, 1, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	p, err := httpprov.New(httpprov.Config{URL: "http://127.0.0.1:1/send", ReceiptSecret: "s3cret", Now: clock})
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
	sum := sha256.Sum256([]byte(body))
	if want := (provider.Inbound{From: "+819012345678", FromField: "from", To: "ACME", Text: " STOP ", At: time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC),
		ProviderID: "sha256:" + hex.EncodeToString(sum[:16])}); in != want {
		t.Fatalf("inbound %+v, want %+v", in, want)
	}
	withID := `{"id":"mo-4711","from":"+819012345678","text":"STOP","at":"2026-11-30T20:00:00Z"}`
	if in, err := parse(p, httpprov.HeaderInboundSignature, httpprov.SignInbound("s3cret", []byte(withID)), withID); err != nil || in.ProviderID != "mo-4711" {
		t.Errorf("with an id: %+v, %v", in, err)
	}
	// A receipt's signature covers the same bytes without the inbound
	// prefix: it never checks as an inbound message's.
	if _, err := parse(p, httpprov.HeaderInboundSignature, httpprov.SignReceipt("s3cret", []byte(body)), body); !errors.Is(err, provider.ErrBadSignature) {
		t.Errorf("a receipt's signature as an inbound message's: %v, want ErrBadSignature", err)
	}
	for name, b := range map[string]string{
		"seven days back": `{"from":"+819012345678","text":"START","at":"2026-11-23T20:00:00Z"}`,
		"no time":         `{"from":"+819012345678","text":"START"}`,
		"ahead":           `{"from":"+819012345678","text":"START","at":"2026-11-30T21:00:00Z"}`,
	} {
		if _, err := parse(p, httpprov.HeaderInboundSignature, httpprov.SignInbound("s3cret", []byte(b)), b); !errors.Is(err, provider.ErrStaleReceipt) {
			t.Errorf("%s: %v, want ErrStaleReceipt", name, err)
		}
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
	for field, bad := range map[string]string{"from": `{"text":"STOP","at":"2026-11-30T20:00:00Z"}`, "body": `STOP`,
		"From": `{"from":"+819012345678","From":"+14155550100","text":"STOP","at":"2026-11-30T20:00:00Z"}`,
		"text": `{"from":"+819012345678","text":"STOP","text":"START","at":"2026-11-30T20:00:00Z"}`,
		"id":   `{"id":"a b","from":"+819012345678","text":"STOP","at":"2026-11-30T20:00:00Z"}`} {
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
	rot, err := httpprov.New(httpprov.Config{URL: "http://127.0.0.1:1/send", ReceiptSecret: "n3w-secret", PreviousReceiptSecret: "s3cret",
		Now: clock})
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
