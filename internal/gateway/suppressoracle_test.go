package gateway

import (
	"encoding/json"
	"net/http"
	"reflect"
	"sort"
	"testing"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// wantSuppressedLater: r accepted a message to a suppressed number (202,
// as any other) and the message then ends suppressed at its take, never
// sent: no attempt, the list's reason. It returns the message's id.
func wantSuppressedLater(t testing.TB, h *harness, r reply) string {
	t.Helper()
	id := accepted(t, r).ID
	var v httpapi.MessageView
	eventually(t, "the message to the suppressed number to end", func() bool {
		v = h.status(t, id)
		return v.Status.Done()
	})
	if v.Status != sms.StatusSuppressed || v.Attempts != 0 || v.LastError != queue.ListedReason || v.SentAt != nil {
		t.Fatalf("GET %+v; want suppressed, never sent", v)
	}
	return id
}

// TestSuppressionNotProbed, in both modes, through real HTTP: a producer
// cannot tell a suppressed number from another by the answer. A message
// to each, alone (with an Idempotency-Key and without) and in a batch, is
// answered alike: 202 (the batch's item 202), the same fields, status
// queued; a replay of the key answers the same bytes. Then the one to the
// suppressed number ends suppressed through the normal lifecycle (GET,
// one message.suppressed callback) and the provider never receives it.
func TestSuppressionNotProbed(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			hook := newHookReceiver(t)
			h := start(t, m, func(c *config.Config) {
				c.Producers[0].Webhook = config.WebhookConfig{URL: hook.srv.URL + "/hook", Secret: testWebhookSecret}
				c.Webhooks.AllowNetworks = []string{"127.0.0.0/8"}
			})
			const listed = "+819012345678"
			wantStatus(t, h.post("/v1/admin/suppressions", keyAdmin, map[string]any{"to": listed, "reason": "asked to stop"}), http.StatusCreated)

			shape := func(r reply) []string {
				t.Helper()
				wantStatus(t, r, http.StatusAccepted)
				var f map[string]any
				if err := json.Unmarshal(r.body, &f); err != nil {
					t.Fatal(err)
				}
				if f["status"] != "queued" {
					t.Errorf("answer %s; want status queued", r.body)
				}
				keys := make([]string, 0, len(f))
				for k := range f {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				return keys
			}
			var ids []string
			for _, key := range []string{"", "probe-1"} {
				post := func(to string) reply {
					hdr := map[string]string{}
					if key != "" {
						hdr["Idempotency-Key"] = key + to
					}
					return h.do(req{method: http.MethodPost, path: "/v1/messages", key: keyNotify, body: msg("marketing", "to", to), header: hdr})
				}
				toListed, toOther := post(listed), post(otherNumber)
				if a, b := shape(toListed), shape(toOther); !reflect.DeepEqual(a, b) {
					t.Errorf("fields %v for the suppressed number, %v for another", a, b)
				}
				if key != "" {
					again := post(listed)
					wantStatus(t, again, http.StatusAccepted)
					if string(again.body) != string(toListed.body) {
						t.Errorf("replay %s; first %s", again.body, toListed.body)
					}
				}
				ids = append(ids, wantSuppressedLater(t, h, toListed))
				eventually(t, "the other message sent", func() bool { return h.status(t, accepted(t, toOther).ID).Status == sms.StatusSent })
			}
			r := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{
				msg("transactional", "to", listed), msg("transactional", "to", otherNumber)}})
			wantStatus(t, r, http.StatusOK)
			var b httpapi.BatchResponse
			r.json(t, &b)
			if b.Accepted != 2 || b.Results[0].Status != http.StatusAccepted || b.Results[1].Status != http.StatusAccepted {
				t.Fatalf("batch %s; want both items accepted", r.body)
			}
			var v httpapi.MessageView
			eventually(t, "the batch's message to the suppressed number to end", func() bool {
				v = h.status(t, b.Results[0].Message.ID)
				return v.Status.Done()
			})
			if v.Status != sms.StatusSuppressed {
				t.Fatalf("batch item to the suppressed number: %+v", v)
			}
			ids = append(ids, v.ID)
			refs := sentRefs(h.sim)
			for _, id := range ids {
				if refs[id] != 0 {
					t.Errorf("the provider received %s", id)
				}
			}
			eventually(t, "a message.suppressed event for each", func() bool {
				n := 0
				for _, bodies := range hook.events() {
					var ev struct{ Type string }
					_ = json.Unmarshal([]byte(bodies[0]), &ev)
					if ev.Type == "message.suppressed" {
						n++
					}
				}
				return n == len(ids)
			})
		})
	}
}
