package embedded

import (
	"errors"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// A batch's index entries go with their messages: pruning drops the
// entries of messages past their retention and keeps those of a message
// still queued, so the index never outgrows the messages kept.
func TestBatchIndexPrunedWithMessages(t *testing.T) {
	clk, q := openRetained(t)
	ctx := t.Context()
	batch := sms.NewBatchID(clk.Now())
	done, live := msg("p", sms.ClassOTP, clk.Now()), msg("p", sms.ClassMarketing, clk.Now())
	done.BatchID, live.BatchID = batch, batch
	if _, err := q.EnqueueMany(ctx, []*sms.Message{done, live}); err != nil {
		t.Fatal(err)
	}
	l, _, err := q.Take(ctx, queue.TakeOptions{Lease: time.Hour, Classes: []sms.Class{sms.ClassOTP}})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	ids := func() []string {
		got, err := q.BatchMessages(ctx, "p", batch)
		if err != nil && !errors.Is(err, queue.ErrNotFound) {
			t.Fatal(err)
		}
		var out []string
		for _, m := range got {
			out = append(out, m.ID)
		}
		// the index itself, not only what it names
		_ = q.view(ctx, func(tx *bolt.Tx) error {
			if n := tx.Bucket(bBatch).Stats().KeyN; n != len(out) {
				t.Errorf("the index holds %d entries for %d messages kept", n, len(out))
			}
			return nil
		})
		return out
	}
	clk.Add(48*time.Hour - time.Millisecond)
	if _, err := q.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ids(); len(got) != 2 {
		t.Fatalf("before the retention: %d ids, want 2", len(got))
	}
	clk.Add(time.Millisecond)
	if _, err := q.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ids(); len(got) != 1 || got[0] != live.ID {
		t.Fatalf("after the sent message's retention: %v, want only the queued %s", got, live.ID)
	}
	if _, err := q.Cancel(ctx, live.ID, "p"); err != nil {
		t.Fatal(err)
	}
	clk.Add(48 * time.Hour)
	if _, err := q.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ids(); len(got) != 0 {
		t.Fatalf("after every message's retention: %v, want none", got)
	}
}

// A day's usage counters stay while a read may ask for them (the
// retention and two days), then Prune deletes them.
func TestUsagePruned(t *testing.T) {
	clk, q := openRetained(t)
	ctx := t.Context()
	m := msg("p", sms.ClassTransactional, clk.Now())
	if _, err := q.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		t.Helper()
		rows, err := q.Usage(ctx, []string{"p"}, m.CreatedAt, m.CreatedAt)
		if err != nil {
			t.Fatal(err)
		}
		return len(rows)
	}
	clk.Add(3 * 24 * time.Hour) // within retention + 2 days of its day's end
	if _, err := q.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d rows within the retention, want 1", n)
	}
	clk.Add(2 * 24 * time.Hour)
	if _, err := q.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d rows after the retention, want 0", n)
	}
}
