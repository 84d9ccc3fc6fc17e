package gateway

import (
	"net/http"
	"strconv"
	"testing"

	"smsgw/internal/httpapi"
	"smsgw/internal/state"
)

// invalidBatch is a batch of n items that all fail validation.
func invalidBatch(n int) map[string]any {
	items := make([]any, n)
	for i := range items {
		items[i] = msg("transactional", "to", "x")
	}
	return map[string]any{"messages": items}
}

// TestRefusedBatchNotAmplified: a batch refused whole
// stores no answer and costs ingress quota, so a producer cannot grow the
// answer store (or its memory) for free; a mixed batch's answer is stored
// compact, far smaller than the body sent.
func TestRefusedBatchNotAmplified(t *testing.T) {
	h := start(t, embeddedMode, nil)
	store := h.app.srv.Store.Idem.(*state.LocalIdempotency)
	for i := range 3 {
		r := h.post("/v1/messages/batch", keyNotify, invalidBatch(1000), "Idempotency-Key", "refused-"+strconv.Itoa(i))
		wantStatus(t, r, http.StatusOK)
		var b httpapi.BatchResponse
		r.json(t, &b)
		if b.Accepted != 0 || b.Rejected != 1000 {
			t.Fatalf("accepted %d rejected %d", b.Accepted, b.Rejected)
		}
	}
	if n, size := store.Size(); n != 0 || size != 0 {
		t.Errorf("3 batches refused whole left %d answers (%d bytes) in the store", n, size)
	}

	// A tenth accepted: within the answer's store budget (1 KiB per
	// accepted item, TestBatchAnswerBudget), so it is kept.
	mixed := invalidBatch(1000)
	for i := range 100 {
		mixed["messages"].([]any)[i*10] = msg("transactional")
	}
	r := h.post("/v1/messages/batch", keyNotify, mixed, "Idempotency-Key", "mixed")
	wantStatus(t, r, http.StatusOK)
	n, size := store.Size()
	if n != 1 || size*20 > int64(len(r.body)) {
		t.Errorf("a %d-byte answer is stored as %d answers of %d bytes; want 1, at most 1/20 of the body", len(r.body), n, size)
	}
	again := h.post("/v1/messages/batch", keyNotify, mixed, "Idempotency-Key", "mixed")
	wantStatus(t, again, http.StatusOK)
	if again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(r.body) {
		t.Errorf("the replay differs from the first answer")
	}
}

// TestRefusedBatchCostsQuota: a batch refused whole takes one unit of the
// producer's ingress quota, so repeating it ends in 429.
func TestRefusedBatchCostsQuota(t *testing.T) {
	h := start(t, embeddedMode, nil) // slow: 2/s, burst 2
	got := map[int]int{}
	for range 10 {
		r := h.post("/v1/messages/batch", keySlow, invalidBatch(2))
		got[r.status]++
		if r.status == http.StatusTooManyRequests && r.header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	}
	if got[http.StatusTooManyRequests] == 0 {
		t.Errorf("10 refused batches at 2/s with a burst of 2: statuses %v, want a 429", got)
	}
}
