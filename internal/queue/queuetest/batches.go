package queuetest

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// The batch index (queue.Batches): a backend that keeps one writes a
// message's entry in the step that stores it, names only messages stored
// (not one an idempotency key or a retried id answered), answers only the
// producer that stored them (ErrNotFound to another, as for an unknown
// batch), and keeps the entries while the messages are kept: after they
// end, and across a reopen.

// batchOf returns n new messages of producer "p" in batch id.
func batchOf(id string, n int) []*sms.Message {
	ms := make([]*sms.Message, n)
	for i := range ms {
		ms[i] = newMsg("p", sms.ClassMarketing)
		ms[i].BatchID = id
	}
	return ms
}

// wantBatch checks that producer "p"'s batch id names exactly want.
func wantBatch(t *testing.T, b queue.Batches, id string, want []*sms.Message) {
	const producer = "p"
	t.Helper()
	ms, err := b.BatchMessages(t.Context(), producer, id)
	if err != nil {
		t.Fatalf("BatchMessages(%s, %s): %v", producer, id, err)
	}
	for _, m := range ms {
		if m.BatchID != id || m.Producer != producer {
			t.Fatalf("BatchMessages(%s, %s) has %s of batch %q, producer %q", producer, id, m.ID, m.BatchID, m.Producer)
		}
	}
	got := ids(ms)
	slices.Sort(got)
	w := ids(want)
	slices.Sort(w)
	if !slices.Equal(got, w) {
		t.Fatalf("BatchMessages(%s, %s) = %d ids %v, want %d %v", producer, id, len(got), got, len(w), w)
	}
}

func wantNoBatch(t *testing.T, b queue.Batches, producer, id string) {
	t.Helper()
	if got, err := b.BatchMessages(t.Context(), producer, id); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("BatchMessages(%s, %s) = %v, %v; want ErrNotFound", producer, id, got, err)
	}
}

func testBatchIndex(t *testing.T, h Harness) {
	q := h.New(t)
	b := facet[queue.Batches](t, q)
	id := sms.NewBatchID(time.Now())
	ms := batchOf(id, 5)
	if _, err := q.EnqueueMany(t.Context(), ms[:3]); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, q, ms[3:]...) // a batch may be stored in several calls
	other := batchOf(sms.NewBatchID(time.Now()), 1)
	mustEnqueue(t, q, other...)
	mustEnqueue(t, q, newMsg("p", sms.ClassMarketing)) // of no batch
	wantBatch(t, b, id, ms)
	wantBatch(t, b, other[0].BatchID, other)
	wantNoBatch(t, b, "other-producer", id) // another producer's batch reads as missing
	wantNoBatch(t, b, "p", sms.NewBatchID(time.Now()))
	if got := mustGet(t, q, ms[0].ID).BatchID; got != id {
		t.Errorf("Get: BatchID %q, want %q", got, id)
	}
	if h.Reopen != nil {
		q = h.Reopen(t, q)
		wantBatch(t, facet[queue.Batches](t, q), id, ms)
	}
}

func testBatchIndexOnlyStored(t *testing.T, h Harness) {
	q := h.New(t)
	b := facet[queue.Batches](t, q)
	first := batchOf(sms.NewBatchID(time.Now()), 2)
	for i, m := range first {
		m.IdempotencyKey = "key #" + string(rune('0'+i))
	}
	mustEnqueue(t, q, first...)
	// A retried batch: new ids and a new batch id, the same item keys.
	retry := batchOf(sms.NewBatchID(time.Now()), 2)
	for i, m := range retry {
		m.IdempotencyKey = first[i].IdempotencyKey
	}
	res, err := q.EnqueueMany(t.Context(), append(retry, first[0]))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !r.Existed || r.Message.BatchID != first[0].BatchID {
			t.Fatalf("retry item %d: Existed %v, BatchID %q; want the first message, of batch %q", i, r.Existed, r.Message.BatchID, first[0].BatchID)
		}
	}
	wantBatch(t, b, first[0].BatchID, first)
	wantNoBatch(t, b, "p", retry[0].BatchID)
}

func testBatchIndexKeptAfterEnd(t *testing.T, h Harness) {
	q := h.New(t)
	b := facet[queue.Batches](t, q)
	ms := batchOf(sms.NewBatchID(time.Now()), 3)
	mustEnqueue(t, q, ms...)
	if _, err := q.Cancel(t.Context(), ms[0].ID, "p"); err != nil {
		t.Fatal(err)
	}
	l := mustTake(t, q, opts(sms.ClassMarketing))
	if err := q.Complete(t.Context(), l, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm-1", Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	wantBatch(t, b, ms[0].BatchID, ms) // a final record keeps its batch id
	got, err := b.BatchMessages(t.Context(), "p", ms[0].BatchID)
	if err != nil {
		t.Fatal(err)
	}
	statuses := map[string]sms.Status{}
	for _, m := range got {
		statuses[m.ID] = m.Status
	}
	want := map[string]sms.Status{ms[0].ID: sms.StatusCanceled, ms[1].ID: sms.StatusSent, ms[2].ID: sms.StatusQueued}
	if !maps.Equal(statuses, want) {
		t.Errorf("BatchMessages statuses %v, want %v", statuses, want)
	}
}
