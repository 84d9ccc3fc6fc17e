package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/provider/httpprov"
)

// Two recipients, each messaged from the same number by a different
// producer, and one nobody messaged.
const (
	replyNumber = "+442079460000" // our number both producers send from
	replyFromA  = "+819012345678" // messaged by notify
	replyFromB  = "+819087654321" // messaged by slow
	replyNobody = "+819011112222"
)

// replyProducers gives notify and slow a webhook each (on loopback
// receivers) and the same sender.
func replyProducers(hookA, hookB *hookReceiver) func(*config.Config) {
	return func(c *config.Config) {
		c.Provider.ReceiptSecret = receiptSecret
		c.Producers[0].Webhook = config.WebhookConfig{URL: hookA.srv.URL + "/hook", Secret: testWebhookSecret}
		c.Producers[2].Webhook = config.WebhookConfig{URL: hookB.srv.URL + "/hook", Secret: testWebhookSecret}
		c.Producers[0].Senders = []string{replyNumber}
		c.Producers[2].Senders = []string{replyNumber}
		c.Webhooks.AllowNetworks = []string{"127.0.0.0/8"}
	}
}

// inboundReply is a signed generic inbound message with the vendor's id.
func inboundReply(id, from, to, text string) req {
	raw, _ := json.Marshal(httpprov.InboundBody{ID: id, From: from, To: to, Text: text, At: time.Now().UTC().Truncate(time.Second)})
	return req{method: http.MethodPost, path: "/v1/inbound/http", body: raw,
		header: map[string]string{httpprov.HeaderInboundSignature: httpprov.SignInbound(receiptSecret, raw)}}
}

// sendAndWait posts a message from replyNumber and waits until it is sent.
func sendAndWait(t *testing.T, h *harness, key, to string) {
	t.Helper()
	r := h.post("/v1/messages", key, msg("transactional", "to", to, "from", replyNumber))
	wantStatus(t, r, http.StatusAccepted)
	var a httpapi.AcceptedMessage
	r.json(t, &a)
	eventually(t, "the message sent", func() bool {
		var v httpapi.MessageView
		h.get("/v1/messages/"+a.ID, key).json(t, &v)
		return v.Status == "sent"
	})
}

// replies are the message.received events a receiver got, by webhook-id,
// each body once per delivery.
func (r *hookReceiver) replies(t *testing.T) map[string][]map[string]any {
	t.Helper()
	out := map[string][]map[string]any{}
	for id, bodies := range r.events() {
		for _, b := range bodies {
			var ev map[string]any
			if err := json.Unmarshal([]byte(b), &ev); err != nil {
				t.Fatal(err)
			}
			if ev["type"] == "message.received" {
				out[id] = append(out[id], ev)
			}
		}
	}
	return out
}

// TestRepliesReachTheirProducer, in both modes, through real HTTP: two
// producers message two recipients from one number; each recipient's
// signed reply reaches, as a message.received event verified with the
// Standard Webhooks signature and valid against the spec, only the
// producer that messaged that recipient; the vendor's retry of a reply is
// one event; a keyword is applied and forwarded too; a reply nobody
// claims is counted and dropped; neither the text nor the number is in
// the logs or /metrics.
func TestRepliesReachTheirProducer(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			hookA, hookB := newHookReceiver(t), newHookReceiver(t)
			h := start(t, m, replyProducers(hookA, hookB))
			sendAndWait(t, h, keyNotify, replyFromA)
			sendAndWait(t, h, keySlow, replyFromB)

			wantStatus(t, h.do(inboundReply("in-a-1", replyFromA, replyNumber, "Yes, Tuesday suits me")), http.StatusNoContent)
			wantStatus(t, h.do(inboundReply("in-b-1", replyFromB, strings.TrimPrefix(replyNumber, "+"), "Wrong person")), http.StatusNoContent)
			wantStatus(t, h.do(inboundReply("in-a-1", replyFromA, replyNumber, "Yes, Tuesday suits me")), http.StatusNoContent) // the vendor's retry
			wantStatus(t, h.do(inboundReply("in-x-1", replyNobody, replyNumber, "Who is this")), http.StatusNoContent)
			wantStatus(t, h.do(inboundReply("in-a-2", replyFromA, replyNumber, "STOP")), http.StatusNoContent)
			eventually(t, "three replies delivered", func() bool { return len(hookA.replies(t)) == 2 && len(hookB.replies(t)) == 1 })

			doc, err := specDoc()
			if err != nil {
				t.Fatal(err)
			}
			schema := doc.Webhooks["messageReceived"].Post.RequestBody.Value.Content["application/json"].Schema.Value
			texts := map[string]string{}
			for name, rc := range map[string]*hookReceiver{"notify": hookA, "slow": hookB} {
				for id, evs := range rc.replies(t) {
					if len(evs) != 1 {
						t.Errorf("%s got reply %s %d times, want once", name, id, len(evs))
					}
					if err := schema.VisitJSON(evs[0]); err != nil {
						t.Errorf("reply %s does not match the messageReceived webhook's body: %v", id, err)
					}
					d := evs[0]["data"].(map[string]any)
					if id != "evt_"+d["id"].(string) || !strings.HasPrefix(d["id"].(string), "rcv_") {
						t.Errorf("reply %s has data.id %v", id, d["id"])
					}
					texts[name+" "+d["from"].(string)+" "+d["text"].(string)] = d["to"].(string)
				}
				if rc.bad != 0 {
					t.Errorf("%s: %d deliveries failed the signature check", name, rc.bad)
				}
			}
			want := map[string]string{
				"notify " + replyFromA + " Yes, Tuesday suits me": replyNumber,
				"notify " + replyFromA + " STOP":                  replyNumber,
				"slow " + replyFromB + " Wrong person":            strings.TrimPrefix(replyNumber, "+"),
			}
			if len(texts) != len(want) {
				t.Fatalf("replies %v, want %v", texts, want)
			}
			for k, v := range want {
				if texts[k] != v {
					t.Errorf("reply %q to %q, want to %q (all: %v)", k, texts[k], v, texts)
				}
			}
			if l := h.suppressionsOf(t); len(l) != 1 || l[0].Source != "recipient" {
				t.Errorf("the forwarded STOP was not applied: %+v", l)
			}
			mv := metricValues(h.metrics(), "smsgw_replies_total")
			for res, n := range map[string]float64{"forwarded": 3, "replayed": 1, "unclaimed": 1, "no_webhook": 0, "unavailable": 0} {
				if got := mv[`smsgw_replies_total{result="`+res+`"}`]; got != n {
					t.Errorf("smsgw_replies_total{result=%q} = %v, want %v", res, got, n)
				}
			}
			for _, secret := range []string{"Tuesday", "Wrong person", "Who is this", "9087654321", "9011112222"} {
				if strings.Contains(h.logs.String(), secret) || strings.Contains(h.metrics(), secret) {
					t.Errorf("%q in the logs or /metrics", secret)
				}
			}
		})
	}
}

// TestRepliesAfterOTPAndLaterSender: an OTP of the fast path records its
// route too (off its answer's path: the reply is posted until it is
// claimed), and a later message to the same recipient from the same
// number by another producer takes the recipient's replies over.
func TestRepliesAfterOTPAndLaterSender(t *testing.T) {
	t.Parallel()
	hookA, hookLogin := newHookReceiver(t), newHookReceiver(t)
	h := start(t, embeddedMode, func(c *config.Config) {
		replyProducers(hookA, hookA)(c)
		c.Producers[1].Webhook = config.WebhookConfig{URL: hookLogin.srv.URL + "/hook", Secret: testWebhookSecret}
		c.Producers[1].Senders = []string{replyNumber}
	})
	wantStatus(t, h.post("/v1/otp", keyLogin, otpBody("to", replyNobody, "from", replyNumber)), http.StatusOK)
	n := 0
	eventually(t, "the OTP recipient's reply forwarded", func() bool {
		mv := metricValues(h.metrics(), "smsgw_replies_total")
		if mv[`smsgw_replies_total{result="forwarded"}`] > 0 {
			return true
		}
		n++
		wantStatus(t, h.do(inboundReply("in-otp-"+strconv.Itoa(n), replyNobody, replyNumber, "Thanks")), http.StatusNoContent)
		return false
	})
	eventually(t, "the OTP recipient's reply at login", func() bool { return len(hookLogin.replies(t)) == 1 })
	sendAndWait(t, h, keyNotify, replyNobody)
	wantStatus(t, h.do(inboundReply("in-later", replyNobody, replyNumber, "Got it")), http.StatusNoContent)
	eventually(t, "the later reply at notify", func() bool { return len(hookA.replies(t)) == 1 })
	for _, evs := range hookLogin.replies(t) {
		if d := evs[0]["data"].(map[string]any); d["text"] != "Thanks" {
			t.Errorf("login got %q: the reply after notify's message is notify's", d["text"])
		}
	}
	if l := len(hookLogin.replies(t)); l != 1 {
		t.Errorf("login got %d replies, want 1", l)
	}
}
