package gateway

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"smsgw/internal/keyspace"
	"smsgw/internal/logtest"
	"smsgw/internal/queue"
	"smsgw/internal/queue/redisq"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
)

// TestCompactorCompacts: the loop compacts what is due on its first run
// (the final records are then read from the compacted form), and a
// failing Redis is logged once, not on every pass.
func TestCompactorCompacts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	account := redistest.Prefix(t)
	q, err := redisq.New(redisq.Config{Client: redistest.Client(t), Account: account, CompactAfter: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = q.Close() }()
	m := smstest.Message("p", sms.ClassOTP)
	if _, err := q.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	l, _, err := q.Take(ctx, queue.TakeOptions{Owner: "t", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "SM-1", Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	logs := &logtest.Buffer{}
	c := newCompactor(q, slog.New(slog.NewTextHandler(logs, nil)), nil)
	c.Start(ctx)
	// Started: its first run compacts the one second due: the second's
	// LIST gives way to its compacted STRING, which Get reads.
	sp, err := keyspace.New(account)
	if err != nil {
		t.Fatal(err)
	}
	created, _ := sms.IDTime(m.ID)
	sec := strconv.FormatInt(created.Unix(), 10)
	list, blob := sp.Prefix("q")+"fin:"+sec, sp.Prefix("q")+"fz:"+sec
	rc := redistest.Client(t)
	deadline := time.Now().Add(10 * time.Second)
	for rc.Exists(ctx, list).Val() != 0 || rc.Exists(ctx, blob).Val() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the loop did not compact the second")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, err := q.Get(ctx, m.ID); err != nil || got.Status != sms.StatusSent {
		t.Fatalf("Get of the compacted record = %+v, %v", got, err)
	}
	c.Stop()

	_ = q.Close()
	for range 3 {
		if err := c.runOnce(ctx); err == nil {
			t.Fatal("runOnce on a closed queue succeeded")
		}
	}
	if n := strings.Count(logs.String(), "compaction of final records failed"); n != 1 {
		t.Fatalf("three failed passes logged %d times, want once:\n%s", n, logs)
	}
}
