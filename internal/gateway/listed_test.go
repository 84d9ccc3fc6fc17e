package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// otherNumber is a recipient who never opts out in these tests.
const otherNumber = "+819087654321"

// TestSuppressedWhileQueued, in both modes, through real HTTP: messages
// accepted before their number was put on the suppression list are never
// sent. A batch holds a marketing message to the number and one to
// another number; then the number is suppressed, while the batch waits:
//
//   - scheduled 2 s ahead, the recipient texts a signed STOP
//     (POST /v1/inbound/http);
//   - queued while sending is paused (POST /v1/admin/pause), an operator
//     adds the number (POST /v1/admin/suppressions), and sending resumes;
//     with protection.suppress_otp an OTP queued by /v1/messages to the
//     number is held back as well.
//
// When its turn comes the message to the number ends suppressed (GET says
// so, no attempt, the list's reason), the simulator never receives it, the
// producer's webhook gets one signed message.suppressed event with error
// code suppressed, and the dispatch outcome metric counts it; the message
// to the other number is sent.
func TestSuppressedWhileQueued(t *testing.T) {
	for _, m := range modes {
		for _, how := range []string{"scheduled, inbound STOP", "paused, operator"} {
			t.Run(string(m)+"/"+how, func(t *testing.T) {
				t.Parallel()
				paused := strings.HasPrefix(how, "paused")
				hook := newHookReceiver(t)
				h := start(t, m, func(c *config.Config) {
					inboundAdapters[0].edit(t, c) // the generic adapter's signed inbound webhook
					c.Producers[0].Webhook = config.WebhookConfig{URL: hook.srv.URL + "/hook", Secret: testWebhookSecret}
					c.Webhooks.AllowNetworks = []string{"127.0.0.0/8"}
					c.Protection.SuppressOTP = paused
				})
				if paused {
					wantStatus(t, h.post("/v1/admin/pause", keyAdmin, map[string]any{"reason": "hold the campaign"}), http.StatusOK)
				}
				extra := []any{"body", "Spring sale! Reply STOP to opt out"}
				if !paused {
					extra = append(extra, "send_at", time.Now().Add(2*time.Second).UTC().Format(time.RFC3339Nano))
				}
				r := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{
					msg("marketing", append(extra, "reference", "to-listed")...),
					msg("marketing", append(extra, "reference", "to-other", "to", otherNumber)...),
				}})
				wantStatus(t, r, http.StatusOK)
				var b httpapi.BatchResponse
				r.json(t, &b)
				if b.Accepted != 2 {
					t.Fatalf("batch %s: want both accepted", r.body)
				}
				listed, other := b.Results[0].Message.ID, b.Results[1].Message.ID
				var otp string
				if paused {
					otp = accepted(t, h.post("/v1/messages", keyLogin, msg("otp", "body", "code 4711"))).ID
				}
				for _, id := range []string{listed, other} {
					if st := h.status(t, id).Status; st != sms.StatusScheduled && st != sms.StatusQueued && st != sms.StatusSending {
						t.Fatalf("%s is %s before the number was suppressed", id, st)
					}
				}

				if paused {
					wantStatus(t, h.post("/v1/admin/suppressions", keyAdmin, map[string]any{"to": inboundFrom, "reason": "complaint"}),
						http.StatusCreated)
					wantStatus(t, h.post("/v1/admin/resume", keyAdmin, nil), http.StatusOK)
				} else {
					inboundAdapters[0].ok(t, inboundAdapters[0].post(h, inboundFrom, "STOP", true))
				}
				if l := h.suppressionsOf(t); len(l) != 1 {
					t.Fatalf("the list %+v; want the number", l)
				}

				var v httpapi.MessageView
				eventually(t, "the message to the listed number suppressed", func() bool {
					v = h.status(t, listed)
					return v.Status.Done()
				})
				if v.Status != sms.StatusSuppressed || v.Attempts != 0 || v.LastError != queue.ListedReason ||
					v.To != "+8190****5678" || v.ProviderMessageID != "" || v.SentAt != nil {
					t.Fatalf("GET %+v; want suppressed, never sent", v)
				}
				eventually(t, "the message to the other number sent", func() bool { return h.status(t, other).Status == sms.StatusSent })
				if otp != "" {
					var o httpapi.MessageView
					r := h.get("/v1/messages/"+otp, keyLogin)
					eventually(t, "the queued OTP suppressed", func() bool {
						r = h.get("/v1/messages/"+otp, keyLogin)
						wantStatus(t, r, http.StatusOK)
						r.json(t, &o)
						return o.Status.Done()
					})
					if o.Status != sms.StatusSuppressed {
						t.Fatalf("queued OTP %+v; want suppressed (protection.suppress_otp)", o)
					}
				}
				refs := sentRefs(h.sim)
				if refs[listed] != 0 || refs[other] != 1 || (otp != "" && refs[otp] != 0) {
					t.Fatalf("the simulator received %v; want only %s, once", refs, other)
				}

				eventually(t, "two status events", func() bool { return len(hook.events()) == 2 })
				doc, err := specDoc()
				if err != nil {
					t.Fatal(err)
				}
				types := map[string]string{}
				for id, bodies := range hook.events() {
					var ev map[string]any
					if err := json.Unmarshal([]byte(bodies[0]), &ev); err != nil {
						t.Fatal(err)
					}
					if err := doc.Components.Schemas["StatusEvent"].Value.VisitJSON(ev); err != nil {
						t.Errorf("event %s does not match StatusEvent: %v\n%s", id, err, bodies[0])
					}
					data := ev["data"].(map[string]any)
					types[data["id"].(string)] = ev["type"].(string)
					if data["id"] != listed {
						continue
					}
					errObj, _ := data["error"].(map[string]any)
					if ev["type"] != "message.suppressed" || data["status"] != "suppressed" || data["reference"] != "to-listed" ||
						errObj == nil || errObj["code"] != queue.EventErrorSuppressed || errObj["message"] != queue.ListedReason {
						t.Errorf("event %s: %s", id, bodies[0])
					}
					if strings.Contains(bodies[0], "9012345678") || strings.Contains(bodies[0], "Spring sale") {
						t.Errorf("event %s carries the number or the text: %s", id, bodies[0])
					}
				}
				if types[listed] != "message.suppressed" || types[other] != "message.sent" {
					t.Errorf("events %v", types)
				}
				if hook.bad != 0 {
					t.Errorf("%d deliveries with a bad signature", hook.bad)
				}
				mv := metricValues(h.metrics(), "smsgw_dispatch_messages_total")
				if got := mv[`smsgw_dispatch_messages_total{class="marketing",outcome="suppressed"}`]; got != 1 {
					t.Errorf("marketing suppressed outcomes %v, want 1", got)
				}
				if got := mv[`smsgw_dispatch_messages_total{class="marketing",outcome="sent"}`]; got != 1 {
					t.Errorf("marketing sent outcomes %v, want 1", got)
				}
				if dl := h.get("/v1/admin/dead-letters", keyAdmin); strings.Contains(string(dl.body), listed) {
					t.Errorf("a suppressed message among the dead letters: %s", dl.body)
				}
			})
		}
	}
}

// TestAcceptKeepsNumberID, in both modes: every path that queues a
// message stores its number's id on the suppression list with it (the id
// an operator's entry for the number gets), so that its take can check
// the list again: a single message (Redis: the one-round-trip accept), a
// batch item, and an OTP queued by /v1/messages. The OTP fast path queues
// nothing and keeps no id.
func TestAcceptKeepsNumberID(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, nil)
			later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
			single := accepted(t, h.post("/v1/messages", keyNotify, msg("marketing", "send_at", later))).ID
			r := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{msg("transactional", "send_at", later)}})
			wantStatus(t, r, http.StatusOK)
			var b httpapi.BatchResponse
			r.json(t, &b)
			item := b.Results[0].Message.ID
			otp := accepted(t, h.post("/v1/messages", keyLogin, msg("otp", "body", "code 4711", "send_at", later))).ID
			fast := h.post("/v1/otp", keyLogin, map[string]any{"to": inboundFrom, "body": "code 4712"})
			wantStatus(t, fast, http.StatusOK)
			var f struct{ ID string }
			fast.json(t, &f)

			add := h.post("/v1/admin/suppressions", keyAdmin, map[string]any{"to": inboundFrom})
			wantStatus(t, add, http.StatusCreated)
			var e httpapi.SuppressionView
			add.json(t, &e)
			for _, id := range []string{single, item, otp} {
				stored, err := h.app.b.queue.Get(t.Context(), id)
				if err != nil {
					t.Fatalf("Get %s: %v", id, err)
				}
				if stored.NumberID != e.ID {
					t.Errorf("stored %s: number id %q; want the list's id %s", id, stored.NumberID, e.ID)
				}
			}
			eventually(t, "the fast path's record", func() bool {
				stored, err := h.app.b.queue.Get(t.Context(), f.ID)
				return err == nil && stored.Status == sms.StatusSent && stored.NumberID == ""
			})
		})
	}
}
