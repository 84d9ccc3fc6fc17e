package vonage_test

import (
	"errors"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/provider/vonage"
)

// TestParseInbound: a signed inbound SMS (form or JSON) is read with its
// sender as E.164; an unsigned, tampered or stale one is refused like a
// receipt; binary messages and parts of a concatenated one carry no text;
// a message without msisdn is a problem naming msisdn.
func TestParseInbound(t *testing.T) {
	now := time.Unix(1800000000, 0)
	p := signedWith(t, vonage.MethodSHA256, func() time.Time { return now })
	base := func() map[string]string {
		return map[string]string{"api-key": "k", "msisdn": "447700900123", "to": "447700900000", "messageId": "0A0000001234ABCD",
			"text": "stop", "type": "text", "keyword": "STOP", "message-timestamp": "2027-01-15 08:00:00",
			"timestamp": strconv.FormatInt(now.Unix(), 10), "nonce": "n-1"}
	}
	parse := func(ps map[string]string, asJSON bool) (provider.Inbound, error) {
		var body, ct string
		if asJSON {
			var b strings.Builder
			b.WriteString("{")
			first := true
			for k, v := range ps {
				if !first {
					b.WriteString(",")
				}
				first = false
				b.WriteString(strconv.Quote(k) + ":" + strconv.Quote(v))
			}
			b.WriteString("}")
			body, ct = b.String(), "application/json"
		} else {
			v := url.Values{}
			for k, s := range ps {
				v.Set(k, s)
			}
			body, ct = v.Encode(), "application/x-www-form-urlencoded"
		}
		r := httptest.NewRequestWithContext(t.Context(), "POST", "/v1/inbound/vonage", strings.NewReader(body))
		r.Header.Set("Content-Type", ct)
		return p.ParseInbound(r, []byte(body))
	}
	signed := func(ps map[string]string) map[string]string {
		ps["sig"] = vonage.Signature(vonage.MethodSHA256, "sig-secret", ps)
		return ps
	}
	for _, asJSON := range []bool{false, true} {
		in, err := parse(signed(base()), asJSON)
		if err != nil {
			t.Fatalf("json %v: %v", asJSON, err)
		}
		if want := (provider.Inbound{From: "+447700900123", FromField: "msisdn", To: "447700900000", Text: "stop", ProviderID: "0A0000001234ABCD",
			At: now}); in != want {
			t.Fatalf("json %v: inbound %+v, want %+v", asJSON, in, want)
		}
	}
	if _, err := parse(base(), false); !errors.Is(err, provider.ErrBadSignature) {
		t.Errorf("unsigned: %v", err)
	}
	tampered := signed(base())
	tampered["msisdn"] = "447700900999"
	if _, err := parse(tampered, false); !errors.Is(err, provider.ErrBadSignature) {
		t.Errorf("tampered: %v", err)
	}
	stale := base()
	stale["timestamp"] = strconv.FormatInt(now.Add(-provider.ReceiptMaxAge-time.Second).Unix(), 10)
	if _, err := parse(signed(stale), false); !errors.Is(err, provider.ErrStaleReceipt) {
		t.Errorf("stale: %v, want ErrStaleReceipt", err)
	}
	binary := base()
	binary["type"], binary["data"] = "binary", "53544f50"
	delete(binary, "text")
	if in, err := parse(signed(binary), false); err != nil || in.Text != "" {
		t.Errorf("binary: %+v, %v; want no text", in, err)
	}
	part := base()
	part["concat"], part["concat-ref"], part["concat-total"], part["concat-part"] = "true", "7", "2", "1"
	if in, err := parse(signed(part), false); err != nil || in.Text != "" {
		t.Errorf("a part of a longer message: %+v, %v; want no text", in, err)
	}
	var re *provider.ReceiptError
	for field, edit := range map[string]func(map[string]string){
		"api-key":   func(ps map[string]string) { ps["api-key"] = "another-account" },
		"messageId": func(ps map[string]string) { ps["messageId"] = "1" },
		"From":      func(ps map[string]string) { ps["From"] = "+14155550100" },
	} {
		ps := base()
		edit(ps)
		for _, asJSON := range []bool{false, true} {
			if _, err := parse(signed(ps), asJSON); !errors.As(err, &re) || re.Field != field {
				t.Errorf("%s (json %v): %v, want a problem naming it", field, asJSON, err)
			}
		}
	}
	// A name given twice (the signature reads the first value) is refused.
	ps := signed(base())
	form := url.Values{}
	for k, v := range ps {
		form.Set(k, v)
	}
	form.Add("msisdn", "14155550100")
	r := httptest.NewRequestWithContext(t.Context(), "POST", "/v1/inbound/vonage", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if _, err := p.ParseInbound(r, []byte(form.Encode())); !errors.As(err, &re) || re.Field != "msisdn" {
		t.Errorf("msisdn twice: %v, want a problem naming msisdn", err)
	}
	dup := `{"api-key":"k","msisdn":"447700900123","msisdn":"14155550100"}`
	r = httptest.NewRequestWithContext(t.Context(), "POST", "/v1/inbound/vonage", strings.NewReader(dup))
	r.Header.Set("Content-Type", "application/json")
	if err := vonage.CheckInboundJSON(p, r, dup); !errors.As(err, &re) || re.Field != "msisdn" {
		t.Errorf("JSON msisdn twice: %v, want a problem naming msisdn", err)
	}
	noFrom := base()
	delete(noFrom, "msisdn")
	if _, err := parse(signed(noFrom), false); !errors.As(err, &re) || re.Field != "msisdn" {
		t.Errorf("no msisdn: %v, want a problem naming msisdn", err)
	}
}
