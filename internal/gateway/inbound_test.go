package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/provider/httpprov"
	"smsgw/internal/provider/twilio"
	"smsgw/internal/provider/vonage"
)

// The number the tests' recipients text from: the harness fails a test
// whose logs show it unmasked.
const (
	inboundFrom  = "+819012345678"
	twilioToken  = "twilio-auth-token-0123"
	twilioPublic = "https://sms.example.com/v1/inbound/twilio"
	vonageSecret = "vonage-signature-secret"
)

// inboundSeq numbers the tests' inbound messages: every message a test
// sends has an id of its own, as a vendor's have.
var inboundSeq atomic.Int64

// twilioMessages are the incoming messages Twilio received, by sid, as
// its Message resource gives them (fakeTwilio serves them): the tests'
// fake Twilio is one account for every test.
var twilioMessages sync.Map

// twilioInbound records an incoming message at the fake Twilio, received
// now, and returns its sid.
func twilioInbound(from, text string) string {
	sid := fmt.Sprintf("SM%032x", inboundSeq.Add(1))
	twilioMessages.Store(sid, map[string]string{"sid": sid, "account_sid": "AC0123456789abcdef0123456789abcdef", "from": from, "to": "+15005550006",
		"body": text, "direction": "inbound", "date_created": time.Now().UTC().Format(time.RFC1123Z),
		"date_sent": time.Now().UTC().Format(time.RFC1123Z)})
	return sid
}

// inboundAdapter is one vendor's inbound webhook as a test speaks it.
type inboundAdapter struct {
	name string
	edit func(t *testing.T, c *config.Config)
	// req is text from the number as the vendor would send it, a new
	// message each time; signed false forges the signature.
	req func(from, text string, signed bool) req
	// ok is the answer to every signed message.
	ok func(t *testing.T, r reply)
}

func noContent(t *testing.T, r reply) {
	t.Helper()
	wantStatus(t, r, http.StatusNoContent)
}

var inboundAdapters = []inboundAdapter{
	{
		name: "http",
		edit: func(_ *testing.T, c *config.Config) { c.Provider.ReceiptSecret = receiptSecret },
		req: func(from, text string, signed bool) req {
			raw, _ := json.Marshal(httpprov.InboundBody{From: from, To: "ACME", Text: text, At: time.Now()})
			secret := receiptSecret
			if !signed {
				secret = "not-the-secret"
			}
			return req{method: http.MethodPost, path: "/v1/inbound/http", body: raw,
				header: map[string]string{httpprov.HeaderInboundSignature: httpprov.SignInbound(secret, raw)}}
		},
		ok: noContent,
	},
	{
		name: "twilio",
		edit: func(t *testing.T, c *config.Config) {
			fake := httptest.NewServer(&fakeTwilio{callbacks: map[string]string{}})
			t.Cleanup(fake.Close)
			c.Provider.Kind = "twilio"
			c.Provider.HTTP.URL = fake.URL
			c.Provider.InboundURL = twilioPublic
			c.Provider.Twilio = twilio.Settings{AccountSID: "AC0123456789abcdef0123456789abcdef", AuthToken: twilioToken, From: "+15005550006"}
		},
		req: func(from, text string, signed bool) req {
			form := url.Values{"MessageSid": {twilioInbound(from, text)}, "AccountSid": {"AC0123456789abcdef0123456789abcdef"}, "From": {from},
				"To": {"+15005550006"}, "Body": {text}, "NumMedia": {"0"}}
			token := twilioToken
			if !signed {
				token = "another-token"
			}
			return req{method: http.MethodPost, path: "/v1/inbound/twilio", body: form.Encode(),
				header: map[string]string{"Content-Type": "application/x-www-form-urlencoded",
					twilio.HeaderSignature: twilio.Signature(token, twilioPublic, form)}}
		},
		ok: func(t *testing.T, r reply) {
			t.Helper()
			wantStatus(t, r, http.StatusOK)
			if ct := r.header.Get("Content-Type"); ct != "text/xml" || !strings.HasSuffix(string(r.body), "<Response/>") {
				t.Fatalf("Twilio answered %s %q; want an empty TwiML Response as text/xml", ct, r.body)
			}
		},
	},
	{
		name: "vonage",
		edit: func(t *testing.T, c *config.Config) {
			c.Provider.Kind = "vonage"
			c.Provider.HTTP.URL = "http://127.0.0.1:1" // nothing is sent
			c.Provider.Vonage = vonage.Settings{APIKey: "key", APISecret: "api-secret", From: "ACME", SignatureSecret: vonageSecret}
		},
		req: func(from, text string, signed bool) req {
			ps := map[string]string{"api-key": "key", "msisdn": strings.TrimPrefix(from, "+"), "to": "447700900000",
				"messageId": fmt.Sprintf("0A%014X", inboundSeq.Add(1)),
				"text":      text, "type": "text", "keyword": strings.ToUpper(strings.Fields(text + " x")[0]),
				"message-timestamp": time.Now().UTC().Format(time.DateTime), "timestamp": strconv.FormatInt(time.Now().Unix(), 10), "nonce": "n1"}
			secret := vonageSecret
			if !signed {
				secret = "not-the-secret"
			}
			form := url.Values{}
			for k, v := range ps {
				form.Set(k, v)
			}
			form.Set("sig", vonage.Signature(vonage.MethodMD5Hash, secret, ps))
			return req{method: http.MethodPost, path: "/v1/inbound/vonage", body: form.Encode(),
				header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}
		},
		ok: noContent,
	},
}

// post sends text from the number as the vendor would, a new message;
// signed false forges the signature.
func (a inboundAdapter) post(h *harness, from, text string, signed bool) reply {
	return h.do(a.req(from, text, signed))
}

// suppressionsOf lists the suppression list (one page).
func (h *harness) suppressionsOf(t testing.TB) []httpapi.SuppressionView {
	t.Helper()
	r := h.get("/v1/admin/suppressions", keyAdmin)
	wantStatus(t, r, http.StatusOK)
	var l httpapi.SuppressionList
	r.json(t, &l)
	return l.Suppressions
}

// TestInboundOptOut, for every adapter in both modes, through real HTTP
// and the vendor's own signature: a forged STOP is 401 and changes
// nothing; other text is acknowledged and only counted; a signed STOP (any
// case, padded) puts the sender on the list as the recipient's entry, and
// the next marketing or transactional message to the number is accepted
// and ends suppressed, unsent; START lifts it; START does not lift an operator's entry (nor
// one the operator took over by adding the number again). Neither the
// number nor the text appears in /metrics, the list or the logs.
func TestInboundOptOut(t *testing.T) {
	for _, a := range inboundAdapters {
		for _, m := range modes {
			t.Run(a.name+"/"+string(m), func(t *testing.T) {
				t.Parallel()
				h := start(t, m, func(c *config.Config) { a.edit(t, c) })

				r := a.post(h, inboundFrom, "STOP", false)
				wantProblem(t, r, http.StatusUnauthorized, httpapi.KindBadSignature, "")
				if l := h.suppressionsOf(t); len(l) != 0 {
					t.Fatalf("a forged STOP changed the list: %+v", l)
				}
				a.ok(t, a.post(h, inboundFrom, "Where is my parcel 4711?", true))
				a.ok(t, a.post(h, inboundFrom, "stop please", true)) // not the whole text: no keyword
				if l := h.suppressionsOf(t); len(l) != 0 {
					t.Fatalf("other text changed the list: %+v", l)
				}
				wantStatus(t, h.post("/v1/messages", keyNotify, msg("marketing")), http.StatusAccepted)

				a.ok(t, a.post(h, inboundFrom, " Stop \n", true))
				l := h.suppressionsOf(t)
				if len(l) != 1 || l[0].Source != "recipient" || l[0].To != "+8190****5678" || l[0].ID == "" {
					t.Fatalf("after STOP the list is %+v; want the recipient's entry, masked", l)
				}
				wantSuppressedLater(t, h, h.post("/v1/messages", keyNotify, msg("marketing")))
				wantSuppressedLater(t, h, h.post("/v1/messages", keyNotify, msg("transactional")))
				a.ok(t, a.post(h, inboundFrom, "UNSUBSCRIBE", true)) // already listed: stays the recipient's
				if l := h.suppressionsOf(t); len(l) != 1 || l[0].Source != "recipient" {
					t.Fatalf("after a second opt-out: %+v", l)
				}

				a.ok(t, a.post(h, inboundFrom, "start", true))
				if l := h.suppressionsOf(t); len(l) != 0 {
					t.Fatalf("START left %+v", l)
				}
				wantStatus(t, h.post("/v1/messages", keyNotify, msg("marketing")), http.StatusAccepted)

				// An operator's entry is the operator's to lift.
				wantStatus(t, h.post("/v1/admin/suppressions", keyAdmin, map[string]any{"to": inboundFrom, "reason": "complaint"}), http.StatusCreated)
				a.ok(t, a.post(h, inboundFrom, "START", true))
				if l := h.suppressionsOf(t); len(l) != 1 || l[0].Source != "operator" {
					t.Fatalf("START lifted an operator's entry: %+v", l)
				}
				wantSuppressedLater(t, h, h.post("/v1/messages", keyNotify, msg("marketing")))
				wantStatus(t, h.do(req{method: http.MethodDelete, path: "/v1/admin/suppressions/" + inboundFrom, key: keyAdmin}), http.StatusNoContent)
				// The recipient's STOP, then the operator's own add: the operator's.
				a.ok(t, a.post(h, inboundFrom, "QUIT", true))
				wantStatus(t, h.post("/v1/admin/suppressions", keyAdmin, map[string]any{"to": inboundFrom}), http.StatusOK)
				a.ok(t, a.post(h, inboundFrom, "UNSTOP", true))
				if l := h.suppressionsOf(t); len(l) != 1 || l[0].Source != "operator" {
					t.Fatalf("the operator's add of a recipient's entry: %+v; want it the operator's, kept by UNSTOP", l)
				}

				metrics := h.metrics()
				mv := metricValues(metrics, "smsgw_inbound_total")
				for kind, want := range map[string]float64{"bad_signature": 1, "other": 2, "opt_out": 3, "opt_in": 3, "malformed": 0} {
					series := `smsgw_inbound_total{adapter="` + a.name + `",kind="` + kind + `"}`
					if mv[series] != want {
						t.Errorf("%s = %v, want %v", series, mv[series], want)
					}
				}
				for _, secret := range []string{"9012345678", "parcel 4711"} {
					if strings.Contains(metrics, secret) || strings.Contains(string(h.get("/v1/admin/suppressions", keyAdmin).body), secret) {
						t.Errorf("%q in /metrics or the list", secret)
					}
				}
				if strings.Contains(h.logs.String(), "parcel 4711") {
					t.Error("a recipient's text in the logs")
				}
			})
		}
	}
}

// TestInboundRefused: an adapter the gateway does not run is 404; a body
// over the bound is 413; a signed message without its sender is 400
// naming the vendor's field, and so is a keyword from something that is
// not a phone number; a stale Vonage message is 401; with opt-outs off,
// keywords are acknowledged and counted as ignored, and nothing changes.
func TestInboundRefused(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) { c.Provider.ReceiptSecret = receiptSecret })
	wantProblem(t, h.do(req{method: http.MethodPost, path: "/v1/inbound/twilio", body: "From=%2B819012345678&Body=STOP",
		header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}), http.StatusNotFound, httpapi.KindNotFound, "")
	big := `{"from":"+819012345678","text":"` + strings.Repeat("x", httpapi.MaxInboundBytes) + `"}`
	wantStatus(t, h.do(req{method: http.MethodPost, path: "/v1/inbound/http", body: big}), http.StatusRequestEntityTooLarge)
	signed := func(body string) reply {
		return h.do(req{method: http.MethodPost, path: "/v1/inbound/http", body: body,
			header: map[string]string{httpprov.HeaderInboundSignature: httpprov.SignInbound(receiptSecret, []byte(body))}})
	}
	at := `,"at":"` + time.Now().UTC().Format(time.RFC3339) + `"}`
	wantProblem(t, signed(`{"text":"STOP"`+at), http.StatusBadRequest, httpapi.KindInvalid, "from")
	wantProblem(t, signed(`{"from":"whatsapp:+819012345678","text":"STOP"`+at), http.StatusBadRequest, httpapi.KindInvalid, "from")
	wantStatus(t, signed(`{"from":"whatsapp:+819012345678","text":"hello"`+at), http.StatusNoContent) // no keyword: the sender is not read
	if l := h.suppressionsOf(t); len(l) != 0 {
		t.Fatalf("refused messages changed the list: %+v", l)
	}
	mv := metricValues(h.metrics(), "smsgw_inbound_total")
	if got := mv[`smsgw_inbound_total{adapter="http",kind="malformed"}`]; got != 2 {
		t.Errorf("malformed counted %v, want 2", got)
	}

	v := start(t, embeddedMode, func(c *config.Config) {
		c.Provider.Kind = "vonage"
		c.Provider.HTTP.URL = "http://127.0.0.1:1"
		c.Provider.Vonage = vonage.Settings{APIKey: "key", APISecret: "api-secret", From: "ACME", SignatureSecret: vonageSecret}
	})
	ps := map[string]string{"msisdn": "819012345678", "to": "447700900000", "messageId": "0A01", "text": "STOP", "type": "text",
		"timestamp": strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10), "nonce": "n1"}
	form := url.Values{}
	for k, s := range ps {
		form.Set(k, s)
	}
	form.Set("sig", vonage.Signature(vonage.MethodMD5Hash, vonageSecret, ps))
	stale := v.do(req{method: http.MethodPost, path: "/v1/inbound/vonage", body: form.Encode(),
		header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}})
	wantProblem(t, stale, http.StatusUnauthorized, httpapi.KindBadSignature, "")
	if !strings.Contains(string(stale.body), "signed time") {
		t.Errorf("stale: %s; want a detail naming the signed time", stale.body)
	}

	off := start(t, redisMode, func(c *config.Config) {
		c.Provider.ReceiptSecret = receiptSecret
		c.Protection.OptOut.Enabled = false
	})
	a := inboundAdapters[0]
	a.ok(t, a.post(off, inboundFrom, "STOP", true))
	a.ok(t, a.post(off, inboundFrom, "START", true))
	if l := off.suppressionsOf(t); len(l) != 0 {
		t.Fatalf("with opt-outs off the list changed: %+v", l)
	}
	wantStatus(t, off.post("/v1/messages", keyNotify, msg("marketing")), http.StatusAccepted)
	if got := metricValues(off.metrics(), "smsgw_inbound_total")[`smsgw_inbound_total{adapter="http",kind="ignored"}`]; got != 2 {
		t.Errorf("ignored keywords counted %v, want 2", got)
	}
}
