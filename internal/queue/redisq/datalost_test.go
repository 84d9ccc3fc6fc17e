package redisq

import (
	"testing"

	dto "github.com/prometheus/client_model/go"

	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

// TestDataLossDetected: Redis losing the account's data (a restart without
// persistence, a FLUSHALL, a failover to an empty replica) looks to every
// other call like an empty queue. The prune's epoch marker tells it apart:
// the replica that finds the marker gone counts and logs the loss and
// writes a new one; a replica that knew the old marker finds it changed
// and counts it too; after that, nothing more is counted. A replica that
// never saw a marker (the first start) counts nothing.
func TestDataLossDetected(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a := newShared(t)
	b := open(t, redistest.Client(t), a.account)
	lost := func(q *Queue) float64 {
		var m dto.Metric
		if err := q.m.dataLost.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	recoverNow := func(q *Queue) {
		t.Helper()
		q.pruned.Store(0) // prune on this Recover, not a minute later
		if _, err := q.Recover(ctx); err != nil {
			t.Fatal(err)
		}
	}
	enqueue(t, a, msg("p", sms.ClassTransactional))
	recoverNow(a)
	recoverNow(b)
	if lost(a) != 0 || lost(b) != 0 {
		t.Fatalf("data lost counted at the first prunes: a %v, b %v", lost(a), lost(b))
	}
	first := *a.epoch.Load()
	if *b.epoch.Load() != first || first == "" {
		t.Fatalf("epochs a %q, b %q: want one marker shared", first, *b.epoch.Load())
	}

	// Redis loses the account's data (here: every key of the account).
	deleteAccount(t, a.account)
	recoverNow(a)
	if lost(a) != 1 {
		t.Fatalf("replica a counted %v losses after the data went, want 1", lost(a))
	}
	second := *a.epoch.Load()
	if second == first {
		t.Fatal("the marker was not written anew")
	}
	recoverNow(b)
	if lost(b) != 1 || *b.epoch.Load() != second {
		t.Errorf("replica b: %v losses, epoch %q; want 1 and the new marker %q", lost(b), *b.epoch.Load(), second)
	}
	recoverNow(a)
	recoverNow(b)
	if lost(a) != 1 || lost(b) != 1 {
		t.Errorf("losses counted again with the data in place: a %v, b %v", lost(a), lost(b))
	}
}
