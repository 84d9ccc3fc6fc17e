package gateway

import (
	"net/http"
	"testing"
	"time"

	"smsgw/internal/httpapi"
	"smsgw/internal/httpapi/batches"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// postBatchOf posts n marketing messages as one batch of producer key
// (header: extra headers) and returns its answer, every item accepted.
func postBatchOf(t *testing.T, h *harness, key string, n int, header ...string) httpapi.BatchResponse {
	t.Helper()
	items := make([]any, n)
	for i := range items {
		items[i] = msg("marketing", "reference", "campaign")
	}
	r := h.post("/v1/messages/batch", key, map[string]any{"messages": items}, header...)
	wantStatus(t, r, http.StatusOK)
	var out httpapi.BatchResponse
	r.json(t, &out)
	if out.Accepted != n || !sms.ValidBatchID(out.BatchID) {
		t.Fatalf("batch answer: %d accepted of %d, batch_id %q", out.Accepted, n, out.BatchID)
	}
	return out
}

func (h *harness) batch(id, key string) batches.View {
	h.t.Helper()
	r := h.get("/v1/batches/"+id, key)
	wantStatus(h.t, r, http.StatusOK)
	var v batches.View
	r.json(h.t, &v)
	return v
}

// A 500-message batch canceled while the send loop is sending it: each
// message is decided once, by the atomic step of DELETE /v1/messages/{id}.
// A message the answer counts canceled never reached the provider; every
// other one reached it exactly once; GET /v1/batches/{id} then agrees with
// the provider's own count.
func TestBatchCancelRacesTheSendLoop(t *testing.T) {
	const n = 500
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, nil).with(t)
			b := postBatchOf(t, h, keyNotify, n)
			// cancel while the send loop is part-way through the batch
			eventually(t, "the first sends", func() bool { return len(h.sim.Accepted()) >= 20 })
			r := h.do(req{method: http.MethodDelete, path: "/v1/batches/" + b.BatchID, key: keyNotify})
			wantStatus(t, r, http.StatusOK)
			var c batches.Canceled
			r.json(t, &c)
			notCancelable := 0
			for _, k := range c.NotCancelable {
				notCancelable += k
			}
			if c.Total != n || c.Canceled+notCancelable != n {
				t.Fatalf("cancel answer: total %d, canceled %d, not cancelable %v; want %d in all", c.Total, c.Canceled, c.NotCancelable, n)
			}
			if c.Canceled == 0 || notCancelable < 20 {
				t.Fatalf("no race: canceled %d, not cancelable %v", c.Canceled, c.NotCancelable)
			}
			// every message not canceled is sent: wait for the sends in
			// flight to be recorded, each message as stored (500 answers
			// of GET /v1/messages/{id} would be most of the test's time)
			var stored []*sms.Message
			eventually(t, "the sends in flight", func() bool {
				var err error
				if stored, err = h.app.b.queue.(queue.Batches).BatchMessages(t.Context(), "notify", b.BatchID); err != nil {
					t.Fatal(err)
				}
				for _, m := range stored {
					if !m.Status.Done() {
						return false
					}
				}
				return true
			})
			sent := sentRefs(h.sim)
			byID := map[string]*sms.Message{}
			for _, m := range stored {
				byID[m.ID] = m
			}
			for _, it := range b.Results {
				id := it.Message.ID
				v := byID[id]
				switch {
				case v == nil:
					t.Fatalf("%s of the batch answer is not in the batch", id)
				case v.BatchID != b.BatchID:
					t.Fatalf("%s: batch_id %q, want %q", id, v.BatchID, b.BatchID)
				case v.Status == sms.StatusCanceled && sent[id] != 0:
					t.Errorf("%s canceled, yet the provider got it %d times", id, sent[id])
				case v.Status != sms.StatusCanceled && (v.Status != sms.StatusSent || sent[id] != 1):
					t.Errorf("%s %s, the provider got it %d times: want sent once", id, v.Status, sent[id])
				}
			}
			if len(sent) != n-c.Canceled || len(h.sim.Accepted()) != n-c.Canceled {
				t.Errorf("the provider got %d sends of %d messages; want %d, one each", len(h.sim.Accepted()), len(sent), n-c.Canceled)
			}
			v := h.batch(b.BatchID, keyNotify)
			if v.Total != n || v.Counts[sms.StatusCanceled] != c.Canceled || v.Counts[sms.StatusSent] != len(sent) {
				t.Errorf("GET batch: %+v; want %d canceled, %d sent", v, c.Canceled, len(sent))
			}
			t.Logf("%s: %d canceled, not cancelable %v, provider got %d", m, c.Canceled, c.NotCancelable, len(sent))
			// canceling again changes nothing and answers the same
			r = h.do(req{method: http.MethodDelete, path: "/v1/batches/" + b.BatchID, key: keyNotify})
			var again batches.Canceled
			r.json(t, &again)
			if again.Canceled != c.Canceled || again.NotCancelable[sms.StatusSent] != len(sent) {
				t.Errorf("second cancel: %+v; want %d canceled, %d sent", again, c.Canceled, len(sent))
			}
		})
	}
}

// A producer sees only its own batches; a retried batch (same
// Idempotency-Key) answers the same batch_id.
func TestBatchIDOwnAndReplayed(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, nil).with(t)
			b := postBatchOf(t, h, keyNotify, 3, "Idempotency-Key", "spring-sale")
			again := postBatchOf(t, h, keyNotify, 3, "Idempotency-Key", "spring-sale")
			if again.BatchID != b.BatchID {
				t.Errorf("retried batch answered %s, want %s", again.BatchID, b.BatchID)
			}
			if v := h.batch(b.BatchID, keyNotify); v.Total != 3 {
				t.Errorf("GET batch: %+v, want 3 messages", v)
			}
			var v httpapi.MessageView
			h.get("/v1/messages/"+b.Results[0].Message.ID, keyNotify).json(t, &v)
			if v.BatchID != b.BatchID {
				t.Errorf("GET message: batch_id %q, want %q", v.BatchID, b.BatchID)
			}
			for _, path := range []string{"/v1/batches/" + b.BatchID, "/v1/batches/" + sms.NewBatchID(time.Now()), "/v1/batches/not-an-id"} {
				wantStatus(t, h.get(path, keySlow), http.StatusNotFound)
				wantStatus(t, h.do(req{method: http.MethodDelete, path: path, key: keySlow}), http.StatusNotFound)
			}
			if v := h.batch(b.BatchID, keyNotify); v.Counts[sms.StatusCanceled] != 0 {
				t.Errorf("another producer's DELETE canceled messages: %+v", v)
			}
		})
	}
}
