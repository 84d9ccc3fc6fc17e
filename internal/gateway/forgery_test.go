package gateway

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/provider/httpprov"
	"smsgw/internal/provider/twilio"
	"smsgw/internal/provider/vonage"
)

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
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
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
