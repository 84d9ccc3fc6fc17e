package gateway

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"testing"

	"smsgw/internal/httpapi"
)

// TestBatchAnswerBudget: a batch answer is kept for replay only within
// 1 KiB (compressed) per accepted item. One accepted item and 999 refused
// ones, each naming an unknown member of the client's choosing (reflected
// in its problem), made Redis keep ~98 KB for 24 h for one unit of quota
// (an audit measured it); now that answer is not kept, and a replay runs
// the batch again, the queue answering the accepted item with the same
// message. An ordinary batch is still kept and replayed.
func TestBatchAnswerBudget(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, nil)
			items := []any{msg("transactional")}
			for range 999 {
				bad := msg("transactional")
				bad["x"+rand.Text()+rand.Text()] = 1 // 53 characters nobody else chose
				items = append(items, bad)
			}
			big := map[string]any{"messages": items}
			first := h.post("/v1/messages/batch", keyNotify, big, "Idempotency-Key", "big-batch-1")
			wantStatus(t, first, http.StatusOK)
			var a, b httpapi.BatchResponse
			first.json(t, &a)
			if a.Accepted != 1 || a.Rejected != 999 {
				t.Fatalf("accepted %d, rejected %d; want 1 and 999", a.Accepted, a.Rejected)
			}
			notKept := func() float64 {
				return metricValues(h.metrics(), "smsgw_api_idempotent_answers_not_kept_total")["smsgw_api_idempotent_answers_not_kept_total"]
			}
			if n := notKept(); n != 1 {
				t.Errorf("answers not kept: %v, want 1", n)
			}
			again := h.post("/v1/messages/batch", keyNotify, big, "Idempotency-Key", "big-batch-1")
			wantStatus(t, again, http.StatusOK)
			again.json(t, &b)
			if again.header.Get("Idempotent-Replayed") != "" {
				t.Error("a batch answer over its budget was replayed from the store")
			}
			if b.Accepted != 1 || b.Results[0].Message == nil || b.Results[0].Message.ID != a.Results[0].Message.ID {
				t.Fatalf("the batch run again accepted %d, first item %+v; want the first message %s", b.Accepted, b.Results[0], a.Results[0].Message.ID)
			}

			small := map[string]any{"messages": []any{msg("transactional"), msg("transactional"), map[string]any{"to": "nope"}}}
			wantStatus(t, h.post("/v1/messages/batch", keyNotify, small, "Idempotency-Key", "small-batch-1"), http.StatusOK)
			r := h.post("/v1/messages/batch", keyNotify, small, "Idempotency-Key", "small-batch-1")
			wantStatus(t, r, http.StatusOK)
			if r.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("an ordinary batch answer was not replayed: %s", fmt.Sprint(r.header))
			}
			if n := notKept(); n != 2 { // the big one, run twice
				t.Errorf("answers not kept: %v, want 2", n)
			}
		})
	}
}
