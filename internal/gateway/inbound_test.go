package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/httpapi/auththrottle"
	"smsgw/internal/provider"
	"smsgw/internal/provider/httpprov"
	"smsgw/internal/provider/sim"
	"smsgw/internal/provider/twilio"
	"smsgw/internal/provider/vonage"
	"smsgw/internal/sms"
	"smsgw/internal/webhook"
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

// startOnVendor starts a gateway in mode m whose provider is of kind,
// its vendor fake; edit sets the rest of the provider's configuration.
func startOnVendor(t *testing.T, m mode, kind string, fake http.Handler, edit func(*config.Config)) *harness {
	t.Helper()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return start(t, m, func(c *config.Config) {
		c.Provider.Kind = kind
		c.Provider.HTTP.URL = srv.URL
		edit(c)
	})
}

// eachInbound runs test for every adapter in both modes, in parallel, each
// on a gateway of its own set up by the adapter (then by edit, when not
// nil).
func eachInbound(t *testing.T, edit func(*config.Config), test func(t *testing.T, a inboundAdapter, h *harness)) {
	for _, a := range inboundAdapters {
		for _, m := range modes {
			t.Run(a.name+"/"+string(m), func(t *testing.T) {
				t.Parallel()
				h := start(t, m, func(c *config.Config) {
					a.edit(t, c)
					if edit != nil {
						edit(c)
					}
				})
				test(t, a, h)
			})
		}
	}
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
	eachInbound(t, nil, func(t *testing.T, a inboundAdapter, h *harness) {
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
		hook := newHookReceiver(t)
		h := startOnVendor(t, m, "twilio", fake, func(c *config.Config) {
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
			ev := statusEvent(t, doc, id, bodies[0])
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
		h := startOnVendor(t, m, "vonage", fake, func(c *config.Config) {
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
	eachInbound(t, func(c *config.Config) {
		c.Protection.MaxSuppressions = 1
	}, func(t *testing.T, a inboundAdapter, h *harness) {
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

// TestInboundReplay, for every adapter in both modes, through real HTTP:
// the recipient texts START, then STOP; the START request, captured as it
// was sent (same bytes, same signature, inside the vendor's replay window
// where it has one), is posted again. It is acknowledged as any signed
// message (so no vendor retries it) and changes nothing: the STOP stands,
// counted as replayed. A real STOP is on the list as soon as its POST is
// answered (its time is logged).
func TestInboundReplay(t *testing.T) {
	eachInbound(t, nil, func(t *testing.T, a inboundAdapter, h *harness) {
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
	for i := range 3 * auththrottle.Burst {
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
		t.Fatalf("%d wrong signatures from one address, none throttled", 3*auththrottle.Burst)
	}
	inboundAdapters[0].ok(t, inboundAdapters[0].post(h, inboundFrom, "STOP", true))
	if l := h.suppressionsOf(t); len(l) != 1 {
		t.Fatalf("a signed STOP from a throttled address was not applied: %+v", l)
	}
	// One line a second at most: however slow the machine, far fewer than
	// the failures.
	if n := strings.Count(h.logs.String(), "provider webhook refused"); n < 1 || n > auththrottle.Burst {
		t.Errorf("%d log lines for %d failed signatures; want them sampled", n, 3*auththrottle.Burst+1)
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

const receiptSecret = "receipt-secret-0123"

func (h *harness) receipt(t testing.TB, secret string, b httpprov.ReceiptBody) reply {
	t.Helper()
	raw, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	hdr := map[string]string{"Content-Type": "application/json"}
	if secret != "" {
		hdr[httpprov.HeaderReceiptSignature] = httpprov.SignReceipt(secret, raw)
	}
	return h.do(req{method: http.MethodPost, path: "/v1/receipts/http", body: raw, header: hdr})
}

func (h *harness) status(t testing.TB, id string) httpapi.MessageView {
	t.Helper()
	r := h.get("/v1/messages/"+id, keyNotify)
	wantStatus(t, r, http.StatusOK)
	var v httpapi.MessageView
	r.json(t, &v)
	return v
}

// viewWhen waits until GET /v1/messages/{id}, as key, answers a view that
// done accepts, and returns it.
func (h *harness) viewWhen(t testing.TB, what, key, id string, done func(httpapi.MessageView) bool) httpapi.MessageView {
	t.Helper()
	var v httpapi.MessageView
	eventually(t, what, func() bool {
		g := h.get("/v1/messages/"+id, key)
		if g.status != http.StatusOK {
			return false
		}
		g.json(t, &v)
		return done(v)
	})
	return v
}

func (h *harness) sendAndWait(t testing.TB) httpapi.MessageView {
	t.Helper()
	a := accepted(t, h.post("/v1/messages", keyNotify, msg("transactional")))
	var v httpapi.MessageView
	eventually(t, "message sent", func() bool {
		v = h.status(t, a.ID)
		return v.Status == sms.StatusSent
	})
	return v
}

// TestReceipts: a signed receipt moves sent to its status, by our id or by
// the provider's; replays and contradicting receipts change nothing;
// forged or unsigned ones are 401 bad-signature and change nothing; a
// receipt for no message of ours is counted, answered 204.
func TestReceipts(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, func(c *config.Config) { c.Provider.ReceiptSecret = receiptSecret })
		a, b := h.sendAndWait(t), h.sendAndWait(t)

		for _, forged := range []string{"", "not-the-secret"} {
			r := h.receipt(t, forged, httpprov.ReceiptBody{Reference: a.ID, Status: "undelivered"})
			wantStatus(t, r, http.StatusUnauthorized)
			if typ := r.problem(t)["type"]; typ != "urn:smsgw:problem:bad-signature" {
				t.Fatalf("forged receipt: type %v", typ)
			}
		}
		if got := h.status(t, a.ID).Status; got != sms.StatusSent {
			t.Fatalf("after forged receipts: %s, want sent", got)
		}

		wantStatus(t, h.receipt(t, receiptSecret, httpprov.ReceiptBody{Reference: a.ID, Status: "delivered", At: time.Now()}), http.StatusNoContent)
		wantStatus(t, h.receipt(t, receiptSecret, httpprov.ReceiptBody{ProviderMessageID: b.ProviderMessageID, Status: "undelivered", ErrorCode: "EC9"}),
			http.StatusNoContent)
		for range 2 {
			wantStatus(t, h.receipt(t, receiptSecret, httpprov.ReceiptBody{Reference: a.ID, Status: "delivered"}), http.StatusNoContent)
			wantStatus(t, h.receipt(t, receiptSecret, httpprov.ReceiptBody{Reference: a.ID, Status: "failed"}), http.StatusNoContent)
			wantStatus(t, h.receipt(t, receiptSecret, httpprov.ReceiptBody{ProviderMessageID: b.ProviderMessageID, Status: "delivered"}), http.StatusNoContent)
		}
		if got := h.status(t, a.ID); got.Status != sms.StatusDelivered {
			t.Fatalf("a: %s, want delivered", got.Status)
		}
		if got := h.status(t, b.ID); got.Status != sms.StatusUndelivered || got.LastError != "EC9" {
			t.Fatalf("b: %s %q, want undelivered EC9", got.Status, got.LastError)
		}
		wantStatus(t, h.receipt(t, receiptSecret, httpprov.ReceiptBody{ProviderMessageID: "pm-nobody", Status: "delivered"}), http.StatusNoContent)
		bad := h.receipt(t, receiptSecret, httpprov.ReceiptBody{Reference: a.ID, Status: "read"})
		wantStatus(t, bad, http.StatusBadRequest)
		// only the configured adapter takes receipts.
		wantStatus(t, h.do(req{method: http.MethodPost, path: "/v1/receipts/twilio", body: "MessageSid=SM1"}), http.StatusNotFound)

		mv := metricValues(string(h.get("/metrics", "").body), "smsgw_receipts_total", "smsgw_receipts_unknown_total",
			"smsgw_receipt_outcomes_total", "smsgw_delivery_ratio", "smsgw_receipt_latency_seconds_count")
		for series, want := range map[string]float64{
			`smsgw_receipts_total{adapter="http",status="delivered"}`:                  6,
			`smsgw_receipts_unknown_total{adapter="http"}`:                             1,
			`smsgw_receipt_outcomes_total{class="transactional",status="delivered"}`:   1,
			`smsgw_receipt_outcomes_total{class="transactional",status="undelivered"}`: 1,
			`smsgw_delivery_ratio{class="transactional"}`:                              0.5,
			`smsgw_receipt_latency_seconds_count{class="transactional"}`:               1,
		} {
			if mv[series] != want {
				t.Errorf("%s = %v, want %v", series, mv[series], want)
			}
		}
	})
}

// TestCancel: a producer cancels its own queued or scheduled message; a
// sent or canceled one is 409 not-cancelable; another producer's is 404.
func TestCancel(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, nil)
		later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		a := accepted(t, h.post("/v1/messages", keyNotify, msg("marketing", "send_at", later)))
		del := func(id, key string) reply {
			return h.do(req{method: http.MethodDelete, path: "/v1/messages/" + id, key: key})
		}
		wantStatus(t, del(a.ID, keySlow), http.StatusNotFound)
		r := del(a.ID, keyNotify)
		wantStatus(t, r, http.StatusOK)
		var v httpapi.MessageView
		r.json(t, &v)
		if v.Status != sms.StatusCanceled {
			t.Fatalf("DELETE answered %s", v.Status)
		}
		if got := h.status(t, a.ID).Status; got != sms.StatusCanceled {
			t.Fatalf("GET after cancel: %s", got)
		}
		again := del(a.ID, keyNotify)
		wantStatus(t, again, http.StatusConflict)
		if typ := again.problem(t)["type"]; typ != "urn:smsgw:problem:not-cancelable" {
			t.Fatalf("second cancel: type %v", typ)
		}
		sent := h.sendAndWait(t)
		wantStatus(t, del(sent.ID, keyNotify), http.StatusConflict)
		wantStatus(t, del("msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA", keyNotify), http.StatusNotFound)
		wantStatus(t, del("nonsense", keyNotify), http.StatusNotFound)
	})
}

// fakeTwilio answers Twilio's Messages endpoint with a new SID and keeps
// each message's StatusCallback.
type fakeTwilio struct {
	mu        sync.Mutex
	n         int
	callbacks map[string]string // SID -> StatusCallback
}

// serveTwilioMessage answers a GET of an incoming message's Message
// resource (twilioInbound) as Twilio does: the record, or 404. false: r
// is not such a GET.
func serveTwilioMessage(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet {
		return false
	}
	sid, _ := strings.CutSuffix(r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:], ".json")
	m, ok := twilioMessages.Load(sid)
	if u, p, auth := r.BasicAuth(); !ok || !auth || u != "AC0123456789abcdef0123456789abcdef" || p == "" ||
		!strings.HasPrefix(r.URL.Path, "/2010-04-01/Accounts/AC0123456789abcdef0123456789abcdef/Messages/") {
		http.NotFound(w, r)
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(m)
	return true
}

func (f *fakeTwilio) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if serveTwilioMessage(w, r) {
		return
	}
	_ = r.ParseForm()
	f.mu.Lock()
	f.n++
	sid := fmt.Sprintf("SM%032d", f.n)
	f.callbacks[sid] = r.PostForm.Get("StatusCallback")
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = fmt.Fprintf(w, `{"sid":%q,"status":"queued"}`, sid)
}

// The fake Twilio account twilioSent sends through (its token is
// twilioToken) and the public URL its receipts come to.
const (
	twilioAccount    = "AC0123456789abcdef0123456789abcdef"
	twilioReceiptURL = "https://sms.example.com/v1/receipts/twilio"
)

// twilioSent starts a gateway on a fake Twilio whose receipts come to
// twilioReceiptURL (edit, when not nil, changes its configuration further),
// sends one message and waits until it is sent; it returns the message and
// the StatusCallback its send asked for.
func twilioSent(t *testing.T, edit func(*config.Config)) (*harness, httpapi.MessageView, string) {
	t.Helper()
	fake := &fakeTwilio{callbacks: map[string]string{}}
	h := startOnVendor(t, embeddedMode, "twilio", fake, func(c *config.Config) {
		c.Provider.ReceiptURL = twilioReceiptURL
		c.Provider.Twilio = twilio.Settings{AccountSID: twilioAccount, AuthToken: twilioToken, From: "+15005550006"}
		if edit != nil {
			edit(c)
		}
	})
	v := h.sendAndWait(t)
	fake.mu.Lock()
	callback := fake.callbacks[v.ProviderMessageID]
	fake.mu.Unlock()
	return h, v, callback
}

// TestTwilioReceipts: behind a proxy (Twilio calls the public
// provider.receipt_url, the gateway sees another host), each send asks for
// a StatusCallback carrying our id, and a StatusCallback signed over the
// public URL moves the message; one signed over the URL the gateway sees,
// or with another token, is 401.
func TestTwilioReceipts(t *testing.T) {
	const token, public = twilioToken, twilioReceiptURL
	h, v, callback := twilioSent(t, nil)
	u, err := url.Parse(callback)
	if err != nil || u.Query().Get("smsgw_ref") != v.ID || !strings.HasPrefix(callback, public+"?") {
		t.Fatalf("StatusCallback %q: want %s?smsgw_ref=%s", callback, public, v.ID)
	}
	form := url.Values{"MessageSid": {v.ProviderMessageID}, "MessageStatus": {"delivered"}, "AccountSid": {twilioAccount}}
	post := func(sig string) reply {
		return h.do(req{method: http.MethodPost, path: "/v1/receipts/twilio?" + u.RawQuery, body: form.Encode(),
			header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", twilio.HeaderSignature: sig}})
	}
	wantStatus(t, post(twilio.Signature(token, h.base+"/v1/receipts/twilio?"+u.RawQuery, form)), http.StatusUnauthorized)
	wantStatus(t, post(twilio.Signature("another-token", callback, form)), http.StatusUnauthorized)
	if got := h.status(t, v.ID).Status; got != sms.StatusSent {
		t.Fatalf("after forged callbacks: %s", got)
	}
	wantStatus(t, post(twilio.Signature(token, callback, form)), http.StatusNoContent)
	if got := h.status(t, v.ID).Status; got != sms.StatusDelivered {
		t.Fatalf("after the signed callback: %s, want delivered", got)
	}
}

// TestReceiptsPauseASenderOrTheAccount: a Twilio StatusCallback with error
// 30001 (a sender's queue overflowed) pauses that sender alone, through
// the same path a send's answer takes, and the account keeps sending; one
// with 30002 (account suspended) pauses the account. Both are counted for
// the alerts; the sender's number is a masked label.
func TestReceiptsPauseASenderOrTheAccount(t *testing.T) {
	h, v, callback := twilioSent(t, func(c *config.Config) {
		c.Limits.Senders = map[string]config.SenderLimits{"+15005550009": {MaxRPS: 1}}
	})
	u, err := url.Parse(callback)
	if err != nil {
		t.Fatal(err)
	}
	receipt := func(code, from string) {
		t.Helper()
		form := url.Values{"MessageSid": {v.ProviderMessageID}, "MessageStatus": {"failed"}, "ErrorCode": {code},
			"From": {from}, "AccountSid": {twilioAccount}}
		wantStatus(t, h.do(req{method: http.MethodPost, path: "/v1/receipts/twilio?" + u.RawQuery, body: form.Encode(),
			header: map[string]string{"Content-Type": "application/x-www-form-urlencoded",
				twilio.HeaderSignature: twilio.Signature(twilioToken, callback, form)}}), http.StatusNoContent)
	}
	receipt("30001", "+15005550009")
	m := metricValues(string(h.get("/metrics", "").body), "smsgw_dispatch_reported_pauses_total", "smsgw_dispatch_sender_pause_remaining_seconds")
	if m[`smsgw_dispatch_reported_pauses_total{scope="sender"}`] != 1 || m[`smsgw_dispatch_reported_pauses_total{scope="account"}`] != 0 {
		t.Errorf("after 30001: %v, want one sender pause", m)
	}
	if left := m[`smsgw_dispatch_sender_pause_remaining_seconds{sender="+150****0009"}`]; left < twilio.QueueFullPause.Seconds()-60 {
		t.Errorf("the sender's pause is %v s, want about %v", left, twilio.QueueFullPause.Seconds())
	}
	h.sendAndWait(t) // the account's own sender still sends
	receipt("30002", "+15005550006")
	m = metricValues(string(h.get("/metrics", "").body), "smsgw_dispatch_reported_pauses_total")
	if m[`smsgw_dispatch_reported_pauses_total{scope="account"}`] != 1 {
		t.Errorf("after 30002: %v, want one account pause", m)
	}
	// Every send now waits: an OTP is refused at once.
	wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusServiceUnavailable)
}

// TestUnknownReceiptsLogSampled: a storm of receipts for no message of ours
// writes one log line per interval, never the vendor's whole id, and a body
// over the receipt bound is 413 before any signature work.
func TestUnknownReceiptsLogSampled(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) { c.Provider.ReceiptSecret = receiptSecret })
	for i := range 50 {
		r := h.receipt(t, receiptSecret, httpprov.ReceiptBody{ProviderMessageID: fmt.Sprintf("vendor-id-%06d", i), Status: "delivered"})
		wantStatus(t, r, http.StatusNoContent)
	}
	logs := h.logs.String()
	if n := strings.Count(logs, "receipts matched no message"); n != 1 {
		t.Errorf("%d log lines for 50 unknown receipts within one interval, want 1", n)
	}
	if strings.Contains(logs, "vendor-id-0000") {
		t.Error("a vendor's id in the log unmasked")
	}
	mv := metricValues(string(h.get("/metrics", "").body), "smsgw_receipts_unknown_total")
	if got := mv[`smsgw_receipts_unknown_total{adapter="http"}`]; got != 50 {
		t.Errorf("unknown receipts counted %v, want 50", got)
	}
	big := `{"status":"delivered","reference":"` + strings.Repeat("x", httpapi.MaxReceiptBytes) + `"}`
	wantStatus(t, h.do(req{method: http.MethodPost, path: "/v1/receipts/http", body: big,
		header: map[string]string{"Content-Type": "application/json"}}), http.StatusRequestEntityTooLarge)
}

// TestStaleVonageReceipt: a Vonage receipt whose signature checks but
// whose signed timestamp is older than provider.ReceiptMaxAge (a captured
// receipt replayed) is 401 with a detail that says why, and a fresh one
// signed the same way is taken: an operator can tell a replayed or
// late-retried receipt from a wrong secret.
func TestStaleVonageReceipt(t *testing.T) {
	const secret = "vonage-signature-secret"
	h := start(t, embeddedMode, func(c *config.Config) {
		c.Provider.Kind = "vonage"
		c.Provider.Vonage = vonage.Settings{APIKey: "key", APISecret: "api-secret", From: "ACME", SignatureSecret: secret}
	})
	post := func(at time.Time) reply {
		ps := map[string]string{"messageId": "0B00000012345678", "status": "delivered", "err-code": "0",
			"client-ref": sms.NewID(time.Now()), "nonce": "n1", "timestamp": strconv.FormatInt(at.Unix(), 10)}
		form := url.Values{}
		for k, v := range ps {
			form.Set(k, v)
		}
		form.Set("sig", vonage.Signature(vonage.MethodMD5Hash, secret, ps))
		return h.do(req{method: http.MethodPost, path: "/v1/receipts/vonage", body: form.Encode(),
			header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}})
	}
	stale := post(time.Now().Add(-provider.ReceiptMaxAge - time.Minute))
	wantStatus(t, stale, http.StatusUnauthorized)
	if !strings.Contains(string(stale.body), "signed time") {
		t.Errorf("stale receipt: %s; want a detail naming the signed time", stale.body)
	}
	wantStatus(t, post(time.Now()), http.StatusNoContent) // no such message: taken and counted as unknown
}

// TestReceiptPreviousSecret: while provider.receipt_secret is rotated a
// receipt signed with previous_receipt_secret is taken and applied, one
// signed with the current secret too, and one signed with an unrelated
// secret is 401 and changes nothing; smsgw_receipt_signatures_total says
// which secret checked each. Without previous_receipt_secret a receipt
// signed with it is 401.
func TestReceiptPreviousSecret(t *testing.T) {
	const previousSecret = "receipt-secret-old-0123"
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, func(c *config.Config) {
			c.Provider.ReceiptSecret = receiptSecret
			c.Provider.PreviousReceiptSecret = previousSecret
		})
		a, b := h.sendAndWait(t), h.sendAndWait(t)

		forged := h.receipt(t, "an-unrelated-secret", httpprov.ReceiptBody{Reference: a.ID, Status: "undelivered"})
		wantStatus(t, forged, http.StatusUnauthorized)
		if typ := forged.problem(t)["type"]; typ != "urn:smsgw:problem:bad-signature" {
			t.Fatalf("forged receipt: type %v", typ)
		}
		if got := h.status(t, a.ID).Status; got != sms.StatusSent {
			t.Fatalf("after a forged receipt: %s, want sent", got)
		}
		wantStatus(t, h.receipt(t, previousSecret, httpprov.ReceiptBody{Reference: a.ID, Status: "delivered"}), http.StatusNoContent)
		if got := h.status(t, a.ID).Status; got != sms.StatusDelivered {
			t.Fatalf("after a receipt signed with the previous secret: %s, want delivered", got)
		}
		wantStatus(t, h.receipt(t, receiptSecret, httpprov.ReceiptBody{ProviderMessageID: b.ProviderMessageID, Status: "undelivered"}),
			http.StatusNoContent)
		if got := h.status(t, b.ID).Status; got != sms.StatusUndelivered {
			t.Fatalf("after a receipt signed with the current secret: %s, want undelivered", got)
		}
		wantStatus(t, h.receipt(t, previousSecret, httpprov.ReceiptBody{Reference: a.ID, Status: "read"}), http.StatusBadRequest)

		got := metricValues(h.metrics(), "smsgw_receipt_signatures_total")
		for series, want := range map[string]float64{
			`smsgw_receipt_signatures_total{adapter="http",secret="previous"}`: 2, // delivered, and the malformed one
			`smsgw_receipt_signatures_total{adapter="http",secret="current"}`:  1,
		} {
			if got[series] != want {
				t.Errorf("%s = %v, want %v", series, got[series], want)
			}
		}
		if strings.Contains(h.logs.String(), previousSecret) || strings.Contains(h.logs.String(), receiptSecret) {
			t.Error("a receipt secret in the log")
		}

		after := start(t, m, func(c *config.Config) { c.Provider.ReceiptSecret = receiptSecret })
		wantStatus(t, after.receipt(t, previousSecret, httpprov.ReceiptBody{ProviderMessageID: "pm-1", Status: "delivered"}), http.StatusUnauthorized)
		wantStatus(t, after.receipt(t, receiptSecret, httpprov.ReceiptBody{ProviderMessageID: "pm-1", Status: "delivered"}), http.StatusNoContent)
	})
}

const testWebhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// callbackProducers gives the notify producer a webhook with one allowed
// callback prefix.
func callbackProducers(cfg *config.Config) {
	cfg.Producers[0].Webhook = config.WebhookConfig{
		URL: "https://notify.example/hook", Secret: testWebhookSecret,
		Allow: []string{"https://notify.example/cb/"},
	}
}

// A callback_url under one of the producer's allow prefixes is stored and
// shown in GET; one under none is a 422 naming the field, on the single,
// batch and OTP endpoints; a malformed one is a 400 naming it.
func TestCallbackURLAllowed(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, callbackProducers)
		ok := "https://notify.example/cb/orders?o=17"
		r := h.post("/v1/messages", keyNotify, msg("transactional", "reference", "order-17", "callback_url", ok))
		wantStatus(t, r, http.StatusAccepted)
		var a httpapi.AcceptedMessage
		r.json(t, &a)
		g := h.get("/v1/messages/"+a.ID, keyNotify)
		wantStatus(t, g, http.StatusOK)
		var v httpapi.MessageView
		g.json(t, &v)
		if v.CallbackURL != ok || v.Reference != "order-17" {
			t.Errorf("GET shows callback_url %q reference %q", v.CallbackURL, v.Reference)
		}
		stored, err := h.app.b.queue.Get(t.Context(), a.ID)
		if err != nil || !stored.Callbacks || stored.CallbackURL != ok {
			t.Errorf("stored %+v, %v: want callbacks on with the url", stored, err)
		}

		for _, bad := range []string{"https://notify.example/other", "https://notify.example.evil.test/cb/"} {
			r = h.post("/v1/messages", keyNotify, msg("transactional", "callback_url", bad))
			wantStatus(t, r, http.StatusUnprocessableEntity)
			if f := r.fields(t); !slices.Equal(f, []string{"callback_url"}) {
				t.Errorf("fields %v, want callback_url", f)
			}
		}
		r = h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{
			msg("transactional", "callback_url", ok), msg("transactional", "callback_url", "https://elsewhere.example/cb/"),
		}})
		wantStatus(t, r, http.StatusOK)
		var br struct{ Accepted, Rejected int }
		r.json(t, &br)
		if br.Accepted != 1 || br.Rejected != 1 {
			t.Errorf("batch accepted %d rejected %d, want 1 and 1", br.Accepted, br.Rejected)
		}
		r = h.post("/v1/messages", keyNotify, msg("transactional", "callback_url", "ftp://notify.example/cb/"))
		wantStatus(t, r, http.StatusBadRequest)
		if f := r.fields(t); !slices.Contains(f, "callback_url") {
			t.Errorf("fields %v, want callback_url", f)
		}
		// login has no webhook at all: any callback_url is refused.
		r = h.post("/v1/otp", keyLogin, map[string]any{"to": "+819012345678", "body": "code 1234", "callback_url": ok})
		wantStatus(t, r, http.StatusUnprocessableEntity)
		if f := r.fields(t); !slices.Equal(f, []string{"callback_url"}) {
			t.Errorf("otp fields %v, want callback_url", f)
		}
		// A message of a producer without a webhook wants no events.
		r = h.post("/v1/messages", keySlow, msg("transactional"))
		wantStatus(t, r, http.StatusAccepted)
		r.json(t, &a)
		if stored, err := h.app.b.queue.Get(t.Context(), a.ID); err != nil || stored.Callbacks {
			t.Errorf("message without a destination: %+v, %v", stored, err)
		}
	})
}

// hookReceiver is a producer's webhook endpoint on the loopback address.
type hookReceiver struct {
	mu     sync.Mutex
	bodies map[string][]string // webhook-id -> bodies
	bad    int
	fail   bool
	srv    *httptest.Server
}

func newHookReceiver(t *testing.T) *hookReceiver {
	key, err := config.ParseWebhookSecret(testWebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	r := &hookReceiver{bodies: map[string][]string{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		id := req.Header.Get(webhook.HeaderID)
		err := webhook.Verify(key, id, req.Header.Get(webhook.HeaderTimestamp), req.Header.Get(webhook.HeaderSignature), body, time.Now(), 5*time.Minute)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil {
			r.bad++
		}
		r.bodies[id] = append(r.bodies[id], string(body))
		if r.fail {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *hookReceiver) events() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.bodies)
}

// A sent message and an OTP produce one signed event each at the producer's
// webhook (the OTP's at its own callback_url), bodies valid against the
// spec's StatusEvent, without the number or the text. A receiver on the
// loopback address is reached only because allow_networks lists it.
func TestCallbacksDelivered(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		hook, own := newHookReceiver(t), newHookReceiver(t)
		h := start(t, m, func(cfg *config.Config) {
			cfg.Producers[0].Webhook = config.WebhookConfig{URL: hook.srv.URL + "/hook", Secret: testWebhookSecret}
			cfg.Producers[1].Webhook = config.WebhookConfig{Secret: testWebhookSecret, Allow: []string{own.srv.URL + "/otp/"}}
			cfg.Webhooks.AllowNetworks = []string{"127.0.0.0/8"}
		})
		r := h.post("/v1/messages", keyNotify, msg("transactional", "reference", "order-9"))
		wantStatus(t, r, http.StatusAccepted)
		var a httpapi.AcceptedMessage
		r.json(t, &a)
		o := h.post("/v1/otp", keyLogin, map[string]any{"to": "+819012345678", "body": "code 4711", "reference": "login-3",
			"callback_url": own.srv.URL + "/otp/x"})
		wantStatus(t, o, http.StatusOK)
		var sent httpapi.OTPSent
		o.json(t, &sent)
		eventually(t, "both events", func() bool { return len(hook.events()) == 1 && len(own.events()) == 1 })

		doc, err := specDoc()
		if err != nil {
			t.Fatal(err)
		}
		schema := doc.Components.Schemas["StatusEvent"].Value
		for want, rc := range map[string]*hookReceiver{a.ID: hook, sent.ID: own} {
			for id, bodies := range rc.events() {
				var ev map[string]any
				if err := json.Unmarshal([]byte(bodies[0]), &ev); err != nil {
					t.Fatal(err)
				}
				if err := schema.VisitJSON(ev); err != nil {
					t.Errorf("event %s does not match StatusEvent: %v\n%s", id, err, bodies[0])
				}
				data := ev["data"].(map[string]any)
				if ev["type"] != "message.sent" || data["id"] != want || data["provider_message_id"] == "" {
					t.Errorf("event %s: %s", id, bodies[0])
				}
				if strings.Contains(bodies[0], "9012345678") || strings.Contains(bodies[0], "code 4711") {
					t.Errorf("event %s carries the number or the text: %s", id, bodies[0])
				}
			}
			if rc.bad != 0 {
				t.Errorf("%d deliveries with a bad signature", rc.bad)
			}
		}
		var st struct {
			Callbacks *struct{ Backlog, Dead int64 } `json:"callbacks"` // absent: not read
		}
		eventually(t, "an empty outbox in the stats", func() bool {
			s := h.get("/v1/admin/stats", keyAdmin)
			wantStatus(t, s, http.StatusOK)
			s.json(t, &st)
			return st.Callbacks != nil && st.Callbacks.Backlog == 0
		})
	})
}

// Without allow_networks the loopback receiver is never reached: the
// attempt is refused at connect time and counted; the admin list of dead
// callbacks and its retry answer as the spec says.
func TestCallbacksToPrivateAddressesRefused(t *testing.T) {
	hook := newHookReceiver(t)
	h := start(t, embeddedMode, func(cfg *config.Config) {
		cfg.Producers[0].Webhook = config.WebhookConfig{URL: hook.srv.URL + "/hook", Secret: testWebhookSecret}
	})
	wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
	eventually(t, "a refused attempt in /metrics", func() bool {
		r := h.get("/metrics", "")
		return strings.Contains(string(r.body), `smsgw_callbacks_attempts_total{outcome="refused"} 1`) ||
			strings.Contains(string(r.body), `smsgw_callbacks_attempts_total{outcome="refused"} 2`)
	})
	if n := len(hook.events()); n != 0 {
		t.Fatalf("the loopback receiver got %d events", n)
	}
	r := h.get("/v1/admin/callbacks/dead", keyAdmin)
	wantStatus(t, r, http.StatusOK)
	wantStatus(t, h.post("/v1/admin/callbacks/dead/evt_nope_1/retry", keyAdmin, nil), http.StatusNotFound)
	wantStatus(t, h.get("/v1/admin/callbacks/dead?limit=0", keyAdmin), http.StatusBadRequest)
}

// TestCallbackSecretRotation: while a producer's webhook.previous_secret
// is set, its endpoint still verifying with that (old) secret accepts
// every delivery, signed with the new secret too.
func TestCallbackSecretRotation(t *testing.T) {
	const newSecret = "whsec_ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="
	hook := newHookReceiver(t) // verifies with testWebhookSecret, the old one
	h := start(t, embeddedMode, func(cfg *config.Config) {
		cfg.Producers[0].Webhook = config.WebhookConfig{URL: hook.srv.URL + "/hook", Secret: newSecret, PreviousSecret: testWebhookSecret}
		cfg.Webhooks.AllowNetworks = []string{"127.0.0.0/8"}
	})
	wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
	eventually(t, "the event", func() bool { return len(hook.events()) == 1 })
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if hook.bad != 0 {
		t.Errorf("%d deliveries the endpoint holding the previous secret could not verify", hook.bad)
	}
}

// A producer's own webhook.allow_networks replaces webhooks.allow_networks
// for its callbacks alone: listed there, its loopback receiver is reached
// while another producer's is refused; listed globally, a producer whose
// own list leaves loopback out is refused while the other falls back to
// the global list and is reached.
func TestCallbackNetworksPerProducer(t *testing.T) {
	for _, tc := range []struct {
		name          string
		global, own   []string
		notifyReached bool
	}{
		{"own list only", nil, []string{"127.0.0.0/8"}, true},
		{"global list, own narrower", []string{"127.0.0.0/8"}, []string{"10.0.0.0/8"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hook, own := newHookReceiver(t), newHookReceiver(t)
			h := start(t, embeddedMode, func(cfg *config.Config) {
				cfg.Producers[0].Webhook = config.WebhookConfig{URL: hook.srv.URL + "/hook", Secret: testWebhookSecret, AllowNetworks: tc.own}
				cfg.Producers[1].Webhook = config.WebhookConfig{Secret: testWebhookSecret, Allow: []string{own.srv.URL + "/otp/"}}
				cfg.Webhooks.AllowNetworks = tc.global
			})
			wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
			wantStatus(t, h.post("/v1/otp", keyLogin, map[string]any{"to": "+819012345678", "body": "code 4711",
				"callback_url": own.srv.URL + "/otp/x"}), http.StatusOK)
			reached, refused := own, hook
			if tc.notifyReached {
				reached, refused = hook, own
			}
			eventually(t, "one event delivered and one refused", func() bool {
				r := h.get("/metrics", "")
				return len(reached.events()) == 1 && strings.Contains(string(r.body), `smsgw_callbacks_attempts_total{outcome="refused"}`) &&
					!strings.Contains(string(r.body), `smsgw_callbacks_attempts_total{outcome="refused"} 0`)
			})
			if n := len(refused.events()); n != 0 {
				t.Fatalf("the receiver outside its producer's networks got %d events", n)
			}
		})
	}
}

// callbackPathProducers gives notify two allow prefixes, one ending with a
// slash and one without, and login one for its OTPs.
func callbackPathProducers(cfg *config.Config) {
	cfg.Producers[0].Webhook = config.WebhookConfig{Secret: testWebhookSecret,
		Allow: []string{"http://127.0.0.1:18999/cb/", "https://notify.example/hook", "https://sms.example/"}}
	cfg.Producers[1].Webhook = config.WebhookConfig{Secret: testWebhookSecret,
		Allow: []string{"http://127.0.0.1:18999/otp/"}}
}

// A callback_url is matched against the allow prefixes by scheme, host and
// path segments, not as a string: dot segments (raw, percent-encoded in any
// case, double-encoded, or with a path parameter), encoded slashes and
// backslashes are a 400 naming callback_url, since they could leave the
// prefix on the receiving server; a path that only shares the prefix's
// characters (/cbx under /cb/, /hook-admin under /hook), another port,
// scheme or host (compared in any ASCII case) is a 422. Single, batch and OTP alike.
func TestCallbackURLPathEscapeRefused(t *testing.T) {
	const base = "http://127.0.0.1:18999"
	malformed := []string{
		base + "/cb/../admin/secret",
		base + "/cb/%2e%2e/admin2",
		base + "/cb/%2E%2E/admin2",
		base + "/cb/.%2e/admin2",
		base + "/cb/%2e./admin2",
		base + "/cb/./x",
		base + "/cb/%2e/x",
		base + "/cb/x/..",
		base + "/cb/..;/admin",
		base + "/cb/%252e%252e/admin",
		base + "/cb/a%2fb",
		base + "/cb%2fx",
		base + "/cb/..%2Fadmin",
		base + "/cb/..%5cadmin",
		base + "/cb/..%5Cadmin",
		base + `/cb/..\admin`,
		"http://user:pw@127.0.0.1:18999/cb/x",
	}
	notAllowed := []string{
		base + "/cbx",
		base + "/cb",
		base + "/admin/cb/x",
		"http://127.0.0.1:18998/cb/x",
		"https://127.0.0.1:18999/cb/x",
		"http://127.0.0.1/cb/x",
		"https://notify.example/hookx",
		"https://notify.example/hook-admin",
		"https://notify.example.evil.test/hook",
		"https://notify.example/hoo",
		"https://\u017fms.example/x", // long s: the same as "s" to Unicode case folding, not to DNS
	}
	allowed := []string{
		base + "/cb/",
		base + "/cb/x?token=SECRET&next=../../admin",
		base + "/cb/a/b.json",
		base + "/cb/...",
		base + "/cb/%7Euser/x",
		"HTTP://127.0.0.1:18999/cb/x",
		"https://NOTIFY.example/hook",
		"https://notify.example/hook",
		"https://notify.example/hook/",
		"https://notify.example/hook/orders/17",
		"https://notify.example/hook?o=17",
		"https://sms.example",
		"https://SMS.EXAMPLE/x",
	}
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, callbackPathProducers)
		for _, u := range malformed {
			r := h.post("/v1/messages", keyNotify, msg("transactional", "callback_url", u))
			if r.status != http.StatusBadRequest {
				t.Errorf("%s: status %d, want 400; body %s", u, r.status, r.body)
				continue
			}
			if f := r.fields(t); !slices.Equal(f, []string{"callback_url"}) {
				t.Errorf("%s: fields %v, want [callback_url]", u, f)
			}
		}
		for _, u := range notAllowed {
			r := h.post("/v1/messages", keyNotify, msg("transactional", "callback_url", u))
			if r.status != http.StatusUnprocessableEntity {
				t.Errorf("%s: status %d, want 422; body %s", u, r.status, r.body)
				continue
			}
			if p := r.problem(t); p["type"] != httpapi.ProblemTypeBase+string(httpapi.KindCallbackNotAllowed) {
				t.Errorf("%s: problem %v, want %s", u, p, httpapi.KindCallbackNotAllowed)
			}
		}
		for _, u := range allowed {
			r := h.post("/v1/messages", keyNotify, msg("transactional", "callback_url", u))
			if r.status != http.StatusAccepted {
				t.Errorf("%s: status %d, want 202; body %s", u, r.status, r.body)
			}
		}

		// A batch refuses the item, naming it, and keeps the others.
		r := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{
			msg("transactional", "callback_url", base+"/cb/ok"),
			msg("transactional", "callback_url", base+"/cb/%2e%2e/admin2"),
			msg("transactional", "callback_url", base+"/cbx"),
		}})
		wantStatus(t, r, http.StatusOK)
		var br struct{ Accepted, Rejected int }
		r.json(t, &br)
		if br.Accepted != 1 || br.Rejected != 2 {
			t.Errorf("batch accepted %d rejected %d, want 1 and 2: %s", br.Accepted, br.Rejected, r.body)
		}

		// The OTP endpoint applies the same rule.
		otp := func(u string) reply {
			return h.post("/v1/otp", keyLogin, map[string]any{"to": "+819012345678", "body": "code 1234", "callback_url": u})
		}
		wantProblem(t, otp(base+"/otp/../admin"), http.StatusBadRequest, httpapi.KindInvalid, "callback_url")
		wantProblem(t, otp(base+"/otpx"), http.StatusUnprocessableEntity, httpapi.KindCallbackNotAllowed, "callback_url")
		wantStatus(t, otp(base+"/otp/x"), http.StatusOK)
	})
}

// TestCallbackURLCheckedAtDelivery: a message's callback_url is checked
// again before each delivery attempt, as the API would check it now. Its
// events are not sent (retried until max_age, then dead: "no destination
// configured or allowed") when the producer's webhook.allow no longer
// covers it: the configuration was
// narrowed after the message was accepted, or an earlier release accepted
// a path that climbs out of its prefix.
func TestCallbackURLCheckedAtDelivery(t *testing.T) {
	own := newHookReceiver(t)
	own.mu.Lock()
	own.fail = true // the first replica's attempts fail: the event stays pending
	own.mu.Unlock()
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, embeddedMode, s.URL())
	cfg.Producers[0].Webhook = config.WebhookConfig{Secret: testWebhookSecret, Allow: []string{own.srv.URL + "/cb/"}}
	cfg.Webhooks.AllowNetworks = []string{"127.0.0.0/8"}
	cfg.Webhooks.BackoffBase, cfg.Webhooks.BackoffMax = 20*time.Millisecond, 50*time.Millisecond
	first := startWith(t, cfg, s)
	wantStatus(t, first.post("/v1/messages", keyNotify, msg("transactional", "callback_url", own.srv.URL+"/cb/x?token=t1")),
		http.StatusAccepted)
	eventually(t, "a failed attempt", func() bool { return len(own.events()) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.app.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	attempts := 0
	for _, bodies := range own.events() {
		attempts += len(bodies)
	}
	own.mu.Lock()
	own.fail = false
	own.mu.Unlock()

	// the same store, the prefix narrowed to another path; the event is
	// retried (another replica of a rolling change might have the
	// prefix) until max_age, which it is past already
	cfg.Producers[0].Webhook.Allow = []string{own.srv.URL + "/other/"}
	cfg.Webhooks.MaxAge = time.Millisecond
	second := startWith(t, cfg, s)
	var dead struct {
		Events []struct {
			LastError string `json:"last_error"`
		} `json:"events"`
	}
	eventually(t, "the event dead", func() bool {
		r := second.get("/v1/admin/callbacks/dead", keyAdmin)
		wantStatus(t, r, http.StatusOK)
		r.json(t, &dead)
		return len(dead.Events) == 1
	})
	if !strings.Contains(dead.Events[0].LastError, "allowed") {
		t.Errorf("dead event's last error %q, want it to say the destination is not allowed", dead.Events[0].LastError)
	}
	n := 0
	for _, bodies := range own.events() {
		n += len(bodies)
	}
	if n != attempts {
		t.Errorf("the receiver got %d attempts after the prefix was narrowed (%d before)", n-attempts, attempts)
	}
}

// The admin API shows a message's callback_url as its scheme and host
// only, in GET /v1/admin/messages/{id} and in the dead letters: its path
// and query may carry the producer's token. The producer's own GET shows
// it whole.
func TestAdminViewHidesCallbackURL(t *testing.T) {
	const (
		secret = "SECRET-TOKEN-42"
		cb     = "https://notify.example/cb/orders/17?token=" + secret
		origin = "https://notify.example"
	)
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, func(cfg *config.Config) {
			callbackProducers(cfg)
			cfg.Dispatch.MaxAttempts = 1
		})
		// Every send fails for now: with max_attempts 1 the message is a
		// dead letter.
		fail := 1.0
		if err := h.sim.Apply(sim.Control{FailRate: &fail}); err != nil {
			t.Fatal(err)
		}
		a := accepted(t, h.post("/v1/messages", keyNotify, msg("transactional", "callback_url", cb)))

		own := h.get("/v1/messages/"+a.ID, keyNotify)
		wantStatus(t, own, http.StatusOK)
		var v httpapi.MessageView
		own.json(t, &v)
		if v.CallbackURL != cb {
			t.Errorf("producer's GET shows callback_url %q, want %q", v.CallbackURL, cb)
		}

		adm := h.get("/v1/admin/messages/"+a.ID, keyAdmin)
		wantStatus(t, adm, http.StatusOK)
		var am httpapi.AdminMessage
		adm.json(t, &am)
		if am.CallbackURL != origin || am.Producer != "notify" {
			t.Errorf("admin GET shows callback_url %q producer %q, want %q and notify", am.CallbackURL, am.Producer, origin)
		}
		if s := string(adm.body); strings.Contains(s, secret) || strings.Contains(s, "/cb/orders") {
			t.Errorf("admin GET shows the callback path or token: %s", s)
		}

		var dl httpapi.DeadLettersResponse
		var body string
		eventually(t, "the dead letter", func() bool {
			r := h.get("/v1/admin/dead-letters", keyAdmin)
			wantStatus(t, r, http.StatusOK)
			r.json(t, &dl)
			body = string(r.body)
			return len(dl.Messages) == 1
		})
		if d := dl.Messages[0]; d.ID != a.ID || d.CallbackURL != origin {
			t.Errorf("dead letter %s shows callback_url %q, want %s with %q", d.ID, d.CallbackURL, a.ID, origin)
		}
		if strings.Contains(body, secret) || strings.Contains(body, "/cb/orders") {
			t.Errorf("dead letters show the callback path or token: %s", body)
		}
	})
}
