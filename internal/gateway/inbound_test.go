package gateway

import (
	"encoding/json"
	"fmt"
	"net"
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
	"smsgw/internal/sms"
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

// optOutTwilio speaks Twilio's Messages API: while optedOut, a send to
// inboundFrom is refused as Twilio refuses a recipient who replied STOP
// (400, code 21610); anything else is accepted. It counts the sends to
// that number.
type optOutTwilio struct {
	optedOut atomic.Bool
	toNumber atomic.Int64
	n        atomic.Int64
}

func (f *optOutTwilio) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if serveTwilioMessage(w, r) {
		return
	}
	_ = r.ParseForm()
	w.Header().Set("Content-Type", "application/json")
	if r.PostForm.Get("To") == inboundFrom {
		f.toNumber.Add(1)
		if f.optedOut.Load() {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprint(w, `{"code":21610,"message":"Attempt to send to unsubscribed recipient","more_info":"https://www.twilio.com/docs/errors/21610","status":400}`)
			return
		}
	}
	w.WriteHeader(http.StatusCreated)
	_, _ = fmt.Fprintf(w, `{"sid":"SM%032d","status":"queued"}`, f.n.Add(1))
}

// TestProviderOptOut, in both modes, through real HTTP: Twilio refuses a
// marketing message with 21610 (the recipient replied STOP at Twilio). The
// message ends suppressed after one send (never retried, not a dead
// letter), its last error says the recipient opted out, the producer's
// webhook gets one signed message.suppressed event with error code
// opted_out; the number is on the list as the provider's entry, and the
// next marketing and transactional messages to it are accepted and end
// suppressed at their takes, spending no send. The recipient's START then lifts the provider's entry.
func TestProviderOptOut(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		fake := &optOutTwilio{}
		fake.optedOut.Store(true)
		srv := httptest.NewServer(fake)
		t.Cleanup(srv.Close)
		hook := newHookReceiver(t)
		h := start(t, m, func(c *config.Config) {
			c.Provider.Kind = "twilio"
			c.Provider.HTTP.URL = srv.URL
			c.Provider.InboundURL = twilioPublic
			c.Provider.Twilio = twilio.Settings{AccountSID: "AC0123456789abcdef0123456789abcdef", AuthToken: twilioToken, From: "+15005550006"}
			c.Producers[0].Webhook = config.WebhookConfig{URL: hook.srv.URL + "/hook", Secret: testWebhookSecret}
			c.Webhooks.AllowNetworks = []string{"127.0.0.0/8"}
		})
		a := accepted(t, h.post("/v1/messages", keyNotify, msg("marketing", "reference", "spring-sale",
			"body", "Spring sale! Reply STOP to opt out")))
		var v httpapi.MessageView
		eventually(t, "the message suppressed", func() bool {
			v = h.status(t, a.ID)
			return v.Status.Done()
		})
		if v.Status != sms.StatusSuppressed || v.Attempts != 1 || v.To != "+8190****5678" ||
			!strings.HasPrefix(v.LastError, "the recipient opted out at the provider: ") || !strings.Contains(v.LastError, "21610") {
			t.Fatalf("GET %+v; want suppressed after one attempt, saying the recipient opted out", v)
		}
		if n := fake.toNumber.Load(); n != 1 {
			t.Errorf("Twilio got %d sends to the number, want 1", n)
		}
		if dl := h.get("/v1/admin/dead-letters", keyAdmin); strings.Contains(string(dl.body), a.ID) {
			t.Errorf("a suppressed message among the dead letters: %s", dl.body)
		}

		eventually(t, "the status event", func() bool { return len(hook.events()) == 1 })
		doc, err := specDoc()
		if err != nil {
			t.Fatal(err)
		}
		for id, bodies := range hook.events() {
			var ev map[string]any
			if err := json.Unmarshal([]byte(bodies[0]), &ev); err != nil {
				t.Fatal(err)
			}
			if err := doc.Components.Schemas["StatusEvent"].Value.VisitJSON(ev); err != nil {
				t.Errorf("event %s does not match StatusEvent: %v\n%s", id, err, bodies[0])
			}
			data := ev["data"].(map[string]any)
			errObj, _ := data["error"].(map[string]any)
			if ev["type"] != "message.suppressed" || data["id"] != a.ID || data["status"] != "suppressed" || data["reference"] != "spring-sale" ||
				errObj == nil || errObj["code"] != "opted_out" || !strings.Contains(errObj["message"].(string), "opted out") {
				t.Errorf("event %s: %s", id, bodies[0])
			}
			if strings.Contains(bodies[0], "9012345678") || strings.Contains(bodies[0], "Spring sale") {
				t.Errorf("event %s carries the number or the text: %s", id, bodies[0])
			}
		}
		if hook.bad != 0 {
			t.Errorf("%d deliveries with a bad signature", hook.bad)
		}

		l := h.suppressionsOf(t)
		if len(l) != 1 || l[0].Source != "provider" || l[0].To != "+8190****5678" || !strings.Contains(l[0].Reason, "opted out") {
			t.Fatalf("the list %+v; want the provider's entry", l)
		}
		wantSuppressedLater(t, h, h.post("/v1/messages", keyNotify, msg("marketing")))
		wantSuppressedLater(t, h, h.post("/v1/messages", keyNotify, msg("transactional")))
		if n := fake.toNumber.Load(); n != 1 {
			t.Errorf("Twilio got %d sends to the number after it was suppressed, want still 1", n)
		}
		mv := metricValues(h.metrics(), "smsgw_dispatch_messages_total")
		if got := mv[`smsgw_dispatch_messages_total{class="marketing",outcome="suppressed"}`]; got != 2 {
			t.Errorf("suppressed outcomes %v, want 2 (the refused send, and the next marketing message ended at its take)", got)
		}

		// The recipient texts START (Twilio lifts its own block too): the
		// provider's entry goes, and messages flow again.
		fake.optedOut.Store(false)
		tw := inboundAdapters[1]
		tw.ok(t, tw.post(h, inboundFrom, "START", true))
		if l := h.suppressionsOf(t); len(l) != 0 {
			t.Fatalf("START left %+v", l)
		}
		b := accepted(t, h.post("/v1/messages", keyNotify, msg("marketing")))
		eventually(t, "the next message sent", func() bool { return h.status(t, b.ID).Status == sms.StatusSent })
	})
}

// fakeVonage speaks the SMS API: every send is accepted (status 0).
type fakeVonage struct {
	mu  sync.Mutex
	ids map[string]string // client-ref -> message-id
}

func (f *fakeVonage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	f.mu.Lock()
	id := fmt.Sprintf("0B%014d", len(f.ids)+1)
	f.ids[r.PostForm.Get("client-ref")] = id
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"message-count":"1","messages":[{"status":"0","message-id":%q}]}`, id)
}

// TestVonageReceiptOptOut, in both modes: Vonage accepts a send and then
// reports in its signed delivery receipt that the recipient opted out
// (status failed, err-code 9, as its Opt-Out Assist guide documents). The
// message takes the receipt's status, and the recipient's number goes on
// the list as the provider's entry, so the next marketing message to it
// ends suppressed, unsent.
func TestVonageReceiptOptOut(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		fake := &fakeVonage{ids: map[string]string{}}
		srv := httptest.NewServer(fake)
		t.Cleanup(srv.Close)
		h := start(t, m, func(c *config.Config) {
			c.Provider.Kind = "vonage"
			c.Provider.HTTP.URL = srv.URL
			c.Provider.Vonage = vonage.Settings{APIKey: "key", APISecret: "api-secret", From: "ACME", SignatureSecret: vonageSecret}
		})
		v := h.sendAndWait(t)
		ps := map[string]string{"messageId": v.ProviderMessageID, "status": "failed", "err-code": "9", "msisdn": "819012345678",
			"to": "ACME", "client-ref": v.ID, "price": "0.00000000", "message-timestamp": time.Now().UTC().Format(time.DateTime),
			"timestamp": strconv.FormatInt(time.Now().Unix(), 10), "nonce": "n9"}
		form := url.Values{}
		for k, s := range ps {
			form.Set(k, s)
		}
		form.Set("sig", vonage.Signature(vonage.MethodMD5Hash, vonageSecret, ps))
		wantStatus(t, h.do(req{method: http.MethodPost, path: "/v1/receipts/vonage", body: form.Encode(),
			header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}), http.StatusNoContent)
		if got := h.status(t, v.ID); got.Status != sms.StatusUndelivered || got.LastError != "9" {
			t.Fatalf("after the receipt: %s %q, want undelivered 9", got.Status, got.LastError)
		}
		l := h.suppressionsOf(t)
		if len(l) != 1 || l[0].Source != "provider" || l[0].To != "+8190****5678" {
			t.Fatalf("the list %+v; want the provider's entry", l)
		}
		wantSuppressedLater(t, h, h.post("/v1/messages", keyNotify, msg("marketing")))
	})
}

// TestOptOutWhenListFull, for every adapter in both modes, through real
// HTTP: with the suppression list at protection.max_suppressions (the
// operator's entries fill it), a recipient's signed STOP is still
// recorded (204 or Twilio's 200, the recipient's entry listed, the next
// message to the number ends suppressed, unsent): an opt-out is never refused for
// lack of room, since a vendor that gets 503 retries it for minutes at
// most (Twilio not at all) and the recipient would go on getting
// messages. The operator's own add stays bounded (409).
func TestOptOutWhenListFull(t *testing.T) {
	const other = "+819087654321"
	for _, a := range inboundAdapters {
		for _, m := range modes {
			t.Run(a.name+"/"+string(m), func(t *testing.T) {
				t.Parallel()
				h := start(t, m, func(c *config.Config) {
					a.edit(t, c)
					c.Protection.MaxSuppressions = 1
				})
				wantStatus(t, h.post("/v1/admin/suppressions", keyAdmin, map[string]any{"to": other}), http.StatusCreated)

				a.ok(t, a.post(h, inboundFrom, "STOP", true))
				l := h.suppressionsOf(t)
				if len(l) != 2 {
					t.Fatalf("after STOP on a full list the list is %+v; want the recipient's entry beside the operator's", l)
				}
				wantSuppressedLater(t, h, h.post("/v1/messages", keyNotify, msg("marketing")))
				wantProblem(t, h.post("/v1/admin/suppressions", keyAdmin, map[string]any{"to": "+819011112222"}),
					http.StatusConflict, httpapi.KindSuppressionsFull, "")
			})
		}
	}
}

// TestInboundReplay, for every adapter in both modes, through real HTTP:
// the recipient texts START, then STOP; the START request, captured as it
// was sent (same bytes, same signature, inside the vendor's replay window
// where it has one), is posted again. It is acknowledged as any signed
// message (so no vendor retries it) and changes nothing: the STOP stands,
// counted as replayed. A real STOP is on the list as soon as its POST is
// answered (its time is logged).
func TestInboundReplay(t *testing.T) {
	for _, a := range inboundAdapters {
		for _, m := range modes {
			t.Run(a.name+"/"+string(m), func(t *testing.T) {
				t.Parallel()
				h := start(t, m, func(c *config.Config) { a.edit(t, c) })
				a.ok(t, a.post(h, inboundFrom, "STOP", true))
				startReq := a.req(inboundFrom, "START", true)
				a.ok(t, h.do(startReq))
				if l := h.suppressionsOf(t); len(l) != 0 {
					t.Fatalf("START left %+v", l)
				}
				began := time.Now()
				a.ok(t, a.post(h, inboundFrom, "STOP", true))
				took := time.Since(began)
				if l := h.suppressionsOf(t); len(l) != 1 || l[0].Source != "recipient" {
					t.Fatalf("after the second STOP the list is %+v", l)
				}
				t.Logf("a real STOP was on the list %v after its POST began", took)

				a.ok(t, h.do(startReq)) // the captured START, again
				if l := h.suppressionsOf(t); len(l) != 1 || l[0].Source != "recipient" {
					t.Fatalf("a replayed START lifted the STOP: %+v", l)
				}
				wantSuppressedLater(t, h, h.post("/v1/messages", keyNotify, msg("marketing")))
				mv := metricValues(h.metrics(), "smsgw_inbound_total")
				for kind, want := range map[string]float64{"replayed": 1, "opt_in": 1, "opt_out": 2} {
					if got := mv[`smsgw_inbound_total{adapter="`+a.name+`",kind="`+kind+`"}`]; got != want {
						t.Errorf("%s counted %v, want %v", kind, got, want)
					}
				}
			})
		}
	}
}

// TestInboundOlderStart, in both modes: a START signed inside the replay
// window but dated before the recipient's STOP was recorded (a capture
// held back, or a vendor's late retry) does not lift the STOP: the entry
// changes only for a message newer than it. A generic START dated seven
// days back is refused as stale.
func TestInboundOlderStart(t *testing.T) {
	for _, m := range modes {
		t.Run("http/"+string(m), func(t *testing.T) {
			t.Parallel()
			a := inboundAdapters[0]
			h := start(t, m, func(c *config.Config) { a.edit(t, c) })
			a.ok(t, a.post(h, inboundFrom, "STOP", true))
			post := func(at time.Time) reply {
				raw, _ := json.Marshal(httpprov.InboundBody{From: inboundFrom, Text: "START", At: at})
				return h.do(req{method: http.MethodPost, path: "/v1/inbound/http", body: raw,
					header: map[string]string{httpprov.HeaderInboundSignature: httpprov.SignInbound(receiptSecret, raw)}})
			}
			r := post(time.Now().Add(-7 * 24 * time.Hour))
			wantProblem(t, r, http.StatusUnauthorized, httpapi.KindBadSignature, "")
			if !strings.Contains(string(r.body), "signed time") {
				t.Errorf("a START seven days old: %s; want a detail naming the signed time", r.body)
			}
			noContent(t, post(time.Now().Add(-10*time.Minute)))
			if l := h.suppressionsOf(t); len(l) != 1 {
				t.Fatalf("a START older than the STOP lifted it: %+v", l)
			}
			if got := metricValues(h.metrics(), "smsgw_inbound_total")[`smsgw_inbound_total{adapter="http",kind="older"}`]; got != 1 {
				t.Errorf("older counted %v, want 1", got)
			}
			noContent(t, post(time.Now()))
			if l := h.suppressionsOf(t); len(l) != 0 {
				t.Fatalf("a START newer than the STOP left %+v", l)
			}
		})
		t.Run("vonage/"+string(m), func(t *testing.T) {
			t.Parallel()
			a := inboundAdapters[2]
			h := start(t, m, func(c *config.Config) { a.edit(t, c) })
			a.ok(t, a.post(h, inboundFrom, "STOP", true))
			ps := map[string]string{"api-key": "key", "msisdn": strings.TrimPrefix(inboundFrom, "+"), "to": "447700900000",
				"messageId": "0A00000000FFFF01", "text": "START", "type": "text",
				"timestamp": strconv.FormatInt(time.Now().Add(-10*time.Minute).Unix(), 10), "nonce": "n1"}
			form := url.Values{}
			for k, v := range ps {
				form.Set(k, v)
			}
			form.Set("sig", vonage.Signature(vonage.MethodMD5Hash, vonageSecret, ps))
			noContent(t, h.do(req{method: http.MethodPost, path: "/v1/inbound/vonage", body: form.Encode(),
				header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}))
			if l := h.suppressionsOf(t); len(l) != 1 {
				t.Fatalf("a START older than the STOP lifted it: %+v", l)
			}
		})
	}
}

// TestInboundRecut, in both modes, through real HTTP: the attacker texts
// "STARTFrom<victim>FromCity" to the account from their own phone and
// captures Twilio's signed request. The victim has opted out. Re-cut into
// a START from the victim with From given twice, the request still carries
// a valid signature and is refused 400 naming From; re-cut with Twilio's
// own names only, each once, Twilio's API (its record of the message:
// another sender, another text) refuses it 401. The STOP stands; the
// captured request itself is the attacker's own text, no keyword.
// (A second capture, "STARTFrom<victim>", re-cut with From given twice,
// the victim's number first, is refused by its form alone.)
func TestInboundRecut(t *testing.T) {
	const attacker = "+85550001111" // sorts after the victim, as the re-cut needs
	eachMode(t, func(t *testing.T, m mode) {
		a := inboundAdapters[1]
		h := start(t, m, func(c *config.Config) { a.edit(t, c) })
		a.ok(t, a.post(h, inboundFrom, "STOP", true))
		text := "STARTFrom" + inboundFrom + "FromCity"
		sid := twilioInbound(attacker, text)
		captured := url.Values{"MessageSid": {sid}, "AccountSid": {"AC0123456789abcdef0123456789abcdef"}, "From": {attacker}, "To": {"+15005550006"},
			"Body": {text}, "NumMedia": {"0"}}
		sig := twilio.Signature(twilioToken, twilioPublic, captured)
		post := func(f url.Values) reply {
			if twilio.Signature(twilioToken, twilioPublic, f) != sig {
				t.Fatalf("the re-cut form %v does not carry the captured signature: the test is wrong", f)
			}
			return h.do(req{method: http.MethodPost, path: "/v1/inbound/twilio", body: f.Encode(),
				header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", twilio.HeaderSignature: sig}})
		}
		recut := func(edit func(url.Values)) url.Values {
			f := url.Values{}
			for k, v := range captured {
				f[k] = append([]string(nil), v...)
			}
			edit(f)
			return f
		}
		// A second capture, its text built for a name given twice.
		text2 := "STARTFrom" + inboundFrom
		sid2 := twilioInbound(attacker, text2)
		captured2 := url.Values{"MessageSid": {sid2}, "AccountSid": {"AC0123456789abcdef0123456789abcdef"}, "From": {attacker}, "To": {"+15005550006"},
			"Body": {text2}, "NumMedia": {"0"}}
		twice := url.Values{"MessageSid": {sid2}, "AccountSid": {"AC0123456789abcdef0123456789abcdef"}, "From": {inboundFrom, attacker}, "To": {"+15005550006"},
			"Body": {"START"}, "NumMedia": {"0"}}
		sig2 := twilio.Signature(twilioToken, twilioPublic, captured2)
		if twilio.Signature(twilioToken, twilioPublic, twice) != sig2 {
			t.Fatalf("the re-cut form %v does not carry the captured signature: the test is wrong", twice)
		}
		wantProblem(t, h.do(req{method: http.MethodPost, path: "/v1/inbound/twilio", body: twice.Encode(),
			header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", twilio.HeaderSignature: sig2}}),
			http.StatusBadRequest, httpapi.KindInvalid, "From")
		wantProblem(t, post(recut(func(f url.Values) {
			f.Set("Body", "START")
			f.Set("From", inboundFrom)
			f.Set("FromCity", "From"+attacker)
		})),
			http.StatusUnauthorized, httpapi.KindBadSignature, "")
		if l := h.suppressionsOf(t); len(l) != 1 || l[0].Source != "recipient" {
			t.Fatalf("a re-cut capture changed the victim's STOP: %+v", l)
		}
		a.ok(t, post(captured))
		mv := metricValues(h.metrics(), "smsgw_inbound_total")
		for kind, want := range map[string]float64{"malformed": 1, "unconfirmed": 1, "opt_in": 0, "other": 1} {
			if got := mv[`smsgw_inbound_total{adapter="twilio",kind="`+kind+`"}`]; got != want {
				t.Errorf("%s counted %v, want %v", kind, got, want)
			}
		}
	})
}

// TestInboundSignatureOracle: a receipt's signature replayed as an inbound
// message's (the same bytes) is refused; failed signatures on the
// webhook endpoints are throttled per client address like failed bearer
// keys (429 with Retry-After once the budget is spent, while a correctly
// signed message still passes) and sample-logged, never one line each.
func TestInboundSignatureOracle(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) { c.Provider.ReceiptSecret = receiptSecret })
	raw, _ := json.Marshal(httpprov.InboundBody{From: inboundFrom, Text: "STOP", At: time.Now()})
	wantProblem(t, h.do(req{method: http.MethodPost, path: "/v1/inbound/http", body: raw,
		header: map[string]string{httpprov.HeaderInboundSignature: httpprov.SignReceipt(receiptSecret, raw)}}),
		http.StatusUnauthorized, httpapi.KindBadSignature, "")
	if l := h.suppressionsOf(t); len(l) != 0 {
		t.Fatalf("a receipt's signature applied a STOP: %+v", l)
	}
	throttled := 0
	for i := range 3 * httpapi.AuthFailBurst {
		guess := httpprov.SignInbound("guess-"+strconv.Itoa(i), raw)
		path, header := "/v1/inbound/http", httpprov.HeaderInboundSignature
		if i%2 == 1 {
			path, header = "/v1/receipts/http", httpprov.HeaderReceiptSignature
		}
		r := h.do(req{method: http.MethodPost, path: path, body: raw, header: map[string]string{header: guess}})
		switch r.status {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			throttled++
			if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
				t.Errorf("429 without a Retry-After: %q", r.header.Get("Retry-After"))
			}
		default:
			t.Fatalf("guess %d: %d %s", i, r.status, r.body)
		}
	}
	if throttled == 0 {
		t.Fatalf("%d wrong signatures from one address, none throttled", 3*httpapi.AuthFailBurst)
	}
	inboundAdapters[0].ok(t, inboundAdapters[0].post(h, inboundFrom, "STOP", true))
	if l := h.suppressionsOf(t); len(l) != 1 {
		t.Fatalf("a signed STOP from a throttled address was not applied: %+v", l)
	}
	// One line a second at most: however slow the machine, far fewer than
	// the failures.
	if n := strings.Count(h.logs.String(), "provider webhook refused"); n < 1 || n > httpapi.AuthFailBurst {
		t.Errorf("%d log lines for %d failed signatures; want them sampled", n, 3*httpapi.AuthFailBurst+1)
	}
}

// Twilio reads the account's own opt-out and opt-in keywords (Advanced
// Opt-Out: custom ones, other languages) and says so in OptOutType; it
// then refuses every send to the number itself. The gateway follows it:
// ARRET with OptOutType STOP lists the number at once, not after a send
// fails with 21610; the opt-in with START lifts it; HELP changes nothing.
func TestTwilioOptOutTypeIsAKeyword(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		twilioAdapter := inboundAdapters[1]
		if twilioAdapter.name != "twilio" {
			t.Fatalf("inboundAdapters[1] is %s", twilioAdapter.name)
		}
		h := start(t, m, func(c *config.Config) { twilioAdapter.edit(t, c) })
		post := func(text, optOutType string) {
			t.Helper()
			form := url.Values{"MessageSid": {twilioInbound(inboundFrom, text)}, "AccountSid": {"AC0123456789abcdef0123456789abcdef"},
				"From": {inboundFrom}, "To": {"+15005550006"}, "Body": {text}, "NumMedia": {"0"}}
			if optOutType != "" {
				form.Set("OptOutType", optOutType)
			}
			twilioAdapter.ok(t, h.do(req{method: http.MethodPost, path: "/v1/inbound/twilio", body: form.Encode(),
				header: map[string]string{"Content-Type": "application/x-www-form-urlencoded",
					twilio.HeaderSignature: twilio.Signature(twilioToken, twilioPublic, form)}}))
		}
		post("ARRET", "") // not one of the gateway's keywords, and Twilio did not read it as one
		if l := h.suppressionsOf(t); len(l) != 0 {
			t.Fatalf("ARRET without OptOutType changed the list: %+v", l)
		}
		post("AIDE", "HELP")
		if l := h.suppressionsOf(t); len(l) != 0 {
			t.Fatalf("HELP changed the list: %+v", l)
		}
		post("ARRET", "STOP")
		l := h.suppressionsOf(t)
		if len(l) != 1 || l[0].Source != "recipient" {
			t.Fatalf("after ARRET read by Twilio as STOP the list is %+v; want the recipient's entry", l)
		}
		wantSuppressedLater(t, h, h.post("/v1/messages", keyNotify, msg("marketing")))
		post("REPRENDRE", "START")
		if l := h.suppressionsOf(t); len(l) != 0 {
			t.Fatalf("the opt-in Twilio read as START left %+v", l)
		}
		wantStatus(t, h.post("/v1/messages", keyNotify, msg("marketing")), http.StatusAccepted)
	})
}

// TestWebhookBodyLogsSampled, through real HTTP: the provider's endpoints
// take no bearer key, so anyone may post to them. A body over their bound
// (sent with or without a length) is 413 and one cut short by its client
// is dropped; either way the WARN and ERROR lines they cause are sampled
// (the first, then at most one a minute with the count), as failed bearer
// keys are, so that an unauthenticated client cannot write one log line
// per request.
func TestWebhookBodyLogsSampled(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) { c.Provider.ReceiptSecret = receiptSecret })
	big := `{"from":"+819012345678","text":"` + strings.Repeat("x", httpapi.MaxInboundBytes) + `"}`
	const n = 10
	before := len(h.logs.String()) // start-up's own WARN lines are not these
	for _, path := range []string{"/v1/inbound/http", "/v1/receipts/http"} {
		for range n {
			wantStatus(t, h.do(req{method: http.MethodPost, path: path, body: big}), http.StatusRequestEntityTooLarge)
			wantStatus(t, h.do(req{method: http.MethodPost, path: path, body: strings.NewReader(big)}), http.StatusRequestEntityTooLarge)
			cutShort(t, h, path)
		}
	}
	lines := 0
	for l := range strings.SplitSeq(strings.TrimSpace(h.logs.String()[before:]), "\n") {
		var e struct{ Level string }
		if json.Unmarshal([]byte(l), &e) == nil && (e.Level == "WARN" || e.Level == "ERROR") {
			lines++
		}
	}
	if lines > 2 {
		t.Fatalf("%d unauthenticated bad bodies wrote %d WARN or ERROR lines; want at most one per endpoint:\n%s",
			6*n, lines, h.logs.String()[before:])
	}
}

// cutShort posts to path a body shorter than its Content-Length and
// closes the connection, as a client that went away does.
func cutShort(t *testing.T, h *harness, path string) {
	t.Helper()
	var d net.Dialer
	c, err := d.DialContext(t.Context(), "tcp", strings.TrimPrefix(h.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_, _ = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"from\":", path)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [512]byte
	_, _ = c.Read(b[:]) // the answer, or the close
}
