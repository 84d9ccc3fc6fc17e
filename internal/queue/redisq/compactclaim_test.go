package redisq

import (
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"smsgw/internal/queue"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

// The compaction claim (compact.go, claimDueScript): a due second is
// compacted by one replica at a time. Each test below notes the change to
// the claim that makes it fail; every one was tried.

// compactReplicas returns n queues of one fresh account on the shared
// Redis, as n replicas would have them (each its own client and its own
// metrics), with a CompactAfter so short that a second is due as soon as
// it is written, and the claims of claims[i] for replica i (a missing or
// zero one: the default).
func compactReplicas(t testing.TB, n int, claims ...time.Duration) []*Queue {
	t.Helper()
	account := freshAccount(t)
	out := make([]*Queue, n)
	for i := range out {
		cfg := Config{Client: redistest.Client(t), Account: account, CompactAfter: time.Nanosecond}
		if i < len(claims) {
			cfg.CompactClaim = claims[i]
		}
		out[i] = openWith(t, cfg)
	}
	return out
}

// dueSeconds completes perSec messages (sent) in each of n creation
// seconds of a minute ago, so that n seconds are due for compaction, and
// returns the messages' ids and the seconds, oldest first.
func dueSeconds(t testing.TB, q *Queue, n, perSec int) (ids []string, secs []int64) {
	t.Helper()
	base := time.Now().Truncate(time.Second).Add(-time.Minute - time.Duration(n)*time.Second)
	for k := range n {
		for _, m := range sameSecondAt(base.Add(time.Duration(k)*time.Second), perSec) {
			send(t, q, m, "SM-"+m.ID)
			ids = append(ids, m.ID)
		}
		secs = append(secs, base.Unix()+int64(k))
	}
	return ids, secs
}

// compactions is how many seconds q's compactions read with result r
// (the smsgw_queue_redis_compactions_total series).
func compactions(q *Queue, r string) int {
	var m dto.Metric
	_ = q.m.compactions.WithLabelValues(r).(prometheus.Metric).Write(&m) // a counter's Write does not fail
	return int(m.GetCounter().GetValue())
}

// compactReads is every second q's compactions read, whatever the result.
func compactReads(q *Queue) int {
	n := 0
	for _, r := range compactResults {
		n += compactions(q, r)
	}
	return n
}

// assertCompacted checks that every second of secs is one blob, no LIST,
// no longer due, and that every id reads back as sent.
func assertCompacted(t *testing.T, q *Queue, secs []int64, ids []string) {
	t.Helper()
	ctx := t.Context()
	for _, sec := range secs {
		if q.c.Exists(ctx, q.k.finAt(sec)).Val() != 0 || q.c.Exists(ctx, q.k.finBlob(sec)).Val() != 1 {
			t.Errorf("second %d: want its blob and no LIST", sec)
		}
	}
	if n := q.c.ZCard(ctx, q.k.finDue()).Val(); n != 0 {
		t.Errorf("%d seconds still due", n)
	}
	for _, id := range ids {
		if got := mustGet(t, q, id); got.Status != sms.StatusSent {
			t.Errorf("%s is %s, want sent", id, got.Status)
		}
	}
}

// TestCompactClaimSharesWork: a replica's claim hides the seconds it took
// from the next replica's, which takes the next ones; replicas compacting
// the same due seconds at once compact each exactly once and read each
// once (no compare-and-set lost, no second read that another had taken).
// Without the claim's re-score (the ZADD line of claimDueScript) the
// second claim returns the first one's seconds again and the concurrent
// replicas read seconds twice: the test fails.
func TestCompactClaimSharesWork(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	t.Run("disjoint claims", func(t *testing.T) {
		t.Parallel()
		reps := compactReplicas(t, 2)
		a, b := reps[0], reps[1]
		ids, secs := dueSeconds(t, a, 8, 2)
		gotA, err := a.claimDue(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		gotB, err := b.claimDue(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]string, len(secs))
		for i, s := range secs {
			want[i] = strconv.FormatInt(s, 10)
		}
		if !slices.Equal(gotA, want[:3]) || !slices.Equal(gotB, want[3:]) {
			t.Fatalf("claims %v then %v, want %v then %v", gotA, gotB, want[:3], want[3:])
		}
		if more, err := a.claimDue(ctx, 100); err != nil || len(more) != 0 {
			t.Fatalf("a claim with every second claimed = %v, %v: want none", more, err)
		}
		for _, c := range []struct {
			q    *Queue
			secs []string
		}{{a, gotA}, {b, gotB}} {
			if n, err := c.q.compactSeconds(ctx, c.secs); err != nil || n != len(c.secs) {
				t.Fatalf("compactSeconds of the claimed seconds = %d, %v: want %d", n, err, len(c.secs))
			}
		}
		assertCompacted(t, a, secs, ids)
	})

	t.Run("concurrent replicas", func(t *testing.T) {
		t.Parallel()
		const replicas, seconds = 4, 48
		reps := compactReplicas(t, replicas)
		ids, secs := dueSeconds(t, reps[0], seconds, 2)
		// Every replica passes at once, 4 seconds a call, until it finds
		// nothing left to claim.
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, q := range reps {
			wg.Go(func() {
				<-start
				for {
					before := compactReads(q)
					if _, err := q.Compact(ctx, 4); err != nil {
						t.Error(err)
						return
					}
					if compactReads(q) == before {
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		compacted, wasted := 0, 0
		var per []int
		for _, q := range reps {
			compacted += compactions(q, compactDone)
			wasted += compactReads(q) - compactions(q, compactDone)
			per = append(per, compactions(q, compactDone))
		}
		t.Logf("seconds compacted by each replica: %v", per)
		if compacted != seconds || wasted != 0 {
			t.Fatalf("%d replicas compacted %d seconds and read %d more for nothing: want %d and 0", replicas, compacted, wasted, seconds)
		}
		assertCompacted(t, reps[0], secs, ids)
	})
}

// TestCompactClaimOfADeadReplica: a second claimed by a replica that then
// does nothing (it died) is skipped by the other replicas while the claim
// lasts, stays due, and is compacted by another replica once the claim
// has ended. Without the claim's re-score the live replica compacts the
// claimed second at once; with a claim that takes the second out of the
// ZSET (ZREM instead of the re-score) it is never compacted: either way
// the test fails.
func TestCompactClaimOfADeadReplica(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	t.Run("skipped while claimed", func(t *testing.T) {
		t.Parallel()
		reps := compactReplicas(t, 2, time.Hour)
		dead, live := reps[0], reps[1]
		ids, secs := dueSeconds(t, live, 2, 1)
		if got, err := dead.claimDue(ctx, 1); err != nil || !slices.Equal(got, []string{strconv.FormatInt(secs[0], 10)}) {
			t.Fatalf("claim = %v, %v: want the oldest second", got, err)
		}
		if n, err := live.Compact(ctx, 100); err != nil || n != 1 {
			t.Fatalf("Compact beside a claim = %d, %v: want 1 (the unclaimed second)", n, err)
		}
		if n := compactReads(live); n != 1 {
			t.Fatalf("the live replica read %d seconds, want 1: it read the claimed one", n)
		}
		if live.c.LLen(ctx, live.k.finAt(secs[0])).Val() != 1 || live.c.Exists(ctx, live.k.finBlob(secs[0])).Val() != 0 {
			t.Fatal("the claimed second was compacted")
		}
		if _, err := live.c.ZScore(ctx, live.k.finDue(), strconv.FormatInt(secs[0], 10)).Result(); err != nil {
			t.Fatalf("the claimed second is no longer due: %v", err)
		}
		if got := mustGet(t, live, ids[0]); got.Status != sms.StatusSent {
			t.Fatalf("the claimed second's record reads %s", got.Status)
		}
	})

	t.Run("taken after the claim", func(t *testing.T) {
		t.Parallel()
		reps := compactReplicas(t, 2, 200*time.Millisecond)
		dead, live := reps[0], reps[1]
		ids, secs := dueSeconds(t, live, 1, 2)
		if got, err := dead.claimDue(ctx, 1); err != nil || len(got) != 1 {
			t.Fatalf("claim = %v, %v", got, err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			n, err := live.Compact(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the second a dead replica claimed was not compacted after its claim")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if n := compactReads(live); n != 1 {
			t.Fatalf("the live replica read %d seconds, want 1", n)
		}
		assertCompacted(t, live, secs, ids)
	})
}

// TestCompactClaimRacesWrite: a completion into a claimed second, between
// the claimer's read and its compare-and-set, fails the compare-and-set,
// not the write; the write's own score replaces the claim's, so the
// second waits to be quiet again (here at once, CompactAfter being 1 ns)
// and not for the claim, which was for an hour; the next compaction by
// another replica takes in both records. Without the claim's re-score the
// other replica compacts the second before the write (it must skip it);
// with a write that no longer moves the score (fin_due's ZADD with NX) the
// second stays claimed and the other replica never compacts it; with a
// compare-and-set that ignores the LIST's digest the write is lost: each
// makes the test fail.
func TestCompactClaimRacesWrite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	reps := compactReplicas(t, 2, time.Hour)
	claimer, other := reps[0], reps[1]
	ms := sameSecond(2)
	enqueue(t, claimer, ms...)
	first := take(t, claimer, time.Hour)
	if err := claimer.Complete(ctx, first, queue.Outcome{Status: sms.StatusSent, ProviderID: "SM-1", Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	sec := secondOf(t, ms[0].ID)
	member := strconv.FormatInt(sec, 10)

	if got, err := claimer.claimDue(ctx, 10); err != nil || !slices.Equal(got, []string{member}) {
		t.Fatalf("claim = %v, %v: want [%s]", got, err, member)
	}
	if n, err := other.Compact(ctx, 10); err != nil || n != 0 || compactReads(other) != 0 {
		t.Fatalf("Compact of a claimed second by another replica = %d, %v: want it skipped", n, err)
	}
	// The claimer reads the second and makes its blob ...
	els, blob, err := claimer.readFinal(ctx, sec)
	if err != nil || len(els) != 1 || blob != "" {
		t.Fatalf("readFinal = %d elements, %q, %v", len(els), blob, err)
	}
	_, newBlob := mergedBlob(t, blob, els)
	// ... the second message completes into the second meanwhile ...
	late := take(t, other, time.Hour)
	if err := other.Complete(ctx, late, queue.Outcome{Status: sms.StatusSent, ProviderID: "SM-2", Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	now, err := claimer.c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if score, err := claimer.c.ZScore(ctx, claimer.k.finDue(), member).Result(); err != nil || score > float64(now.UnixMilli()) {
		t.Fatalf("score after a write into a claimed second = %v, %v: want the write's time (≤ %d), not the claim's end", score, err, now.UnixMilli())
	}
	// ... and the claimer's compare-and-set fails.
	keys := []string{claimer.k.finAt(sec), claimer.k.finBlob(sec), claimer.k.finDue()}
	if res, err := compactScript.Run(ctx, claimer.c, keys, member, listDigest(els), "", newBlob, claimer.retention.Milliseconds()).Int(); err != nil || res != -1 {
		t.Fatalf("the claimer's compare-and-set after the write = %d, %v: want -1", res, err)
	}
	if claimer.c.LLen(ctx, claimer.k.finAt(sec)).Val() != 2 || claimer.c.ZCard(ctx, claimer.k.finDue()).Val() != 1 {
		t.Fatal("after the failed compare-and-set: want both records in the LIST and the second still due")
	}
	if n, err := other.Compact(ctx, 10); err != nil || n != 1 {
		t.Fatalf("Compact after the write = %d, %v: want the second compacted", n, err)
	}
	assertCompacted(t, other, []int64{sec}, []string{ms[0].ID, ms[1].ID})
	entries, err := decodeBlob(other.c.Get(ctx, other.k.finBlob(sec)).Val())
	if err != nil || len(entries) != 2 {
		t.Fatalf("blob of %d records, %v: want 2", len(entries), err)
	}
}

// compactClaimOnCluster: two replicas' claims on a Redis Cluster are
// disjoint, and every second is compacted (TestCompactedCluster).
func compactClaimOnCluster(t *testing.T, a *Queue) {
	ctx := t.Context()
	b := openWith(t, Config{Client: a.c, Account: a.account, CompactAfter: time.Nanosecond})
	compactNow(t, a) // what the subtests before left
	ids, secs := dueSeconds(t, a, 4, 1)
	gotA, errA := a.claimDue(ctx, 2)
	gotB, errB := b.claimDue(ctx, 10)
	if errA != nil || errB != nil || len(gotA) != 2 || len(gotB) != 2 || slices.ContainsFunc(gotA, func(s string) bool { return slices.Contains(gotB, s) }) {
		t.Fatalf("claims %v, %v then %v, %v: want two seconds each, disjoint", gotA, errA, gotB, errB)
	}
	for _, c := range []struct {
		q    *Queue
		secs []string
	}{{a, gotA}, {b, gotB}} {
		if n, err := c.q.compactSeconds(ctx, c.secs); err != nil || n != 2 {
			t.Fatalf("compactSeconds = %d, %v: want 2", n, err)
		}
	}
	assertCompacted(t, a, secs, ids)
}
