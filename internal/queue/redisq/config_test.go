package redisq

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/queue"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

func TestNewRejects(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	for _, cfg := range []Config{
		{Account: "a"},
		{Client: c},
		{Client: c, Account: "a}b"},
		{Client: c, Account: "{a}"},
		{Client: c, Account: "a", Retention: -time.Second},
		{Client: c, Account: "a", CompactClaim: -time.Second},
	} {
		if q, err := New(cfg); err == nil {
			_ = q.Close()
			t.Errorf("New(%+v): no error", cfg)
		}
	}
}

// TestRetention: a terminal message is readable for Retention and pruned
// after it, by a later Complete; the retention runs on the Redis clock.
func TestRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := newWith(t, Config{Retention: 100 * time.Millisecond})
	a, b := msg("p", sms.ClassOTP), msg("p", sms.ClassOTP)
	enqueue(t, q, a, b)
	if err := q.Complete(ctx, take(t, q, time.Hour), queue.Outcome{Status: sms.StatusSent, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Get(ctx, a.ID); err != nil {
		t.Fatalf("Get within retention: %v", err)
	}
	time.Sleep(150 * time.Millisecond) // past the retention: a lower bound, any delay is fine
	if err := q.Complete(ctx, take(t, q, time.Hour), queue.Outcome{Status: sms.StatusSent, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Get(ctx, a.ID); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Get past retention: %v, want ErrNotFound", err)
	}
	if _, err := q.Get(ctx, b.ID); err != nil {
		t.Fatalf("Get of the message completed just now: %v", err)
	}
}

// TestIdempotencyWindow: after the window the same key makes a new message.
func TestIdempotencyWindow(t *testing.T) {
	t.Parallel()
	q := newWith(t, Config{IdempotencyWindow: 100 * time.Millisecond})
	first, second := msg("p", sms.ClassOTP), msg("p", sms.ClassOTP)
	first.IdempotencyKey, second.IdempotencyKey = "k", "k"
	enqueue(t, q, first)
	time.Sleep(150 * time.Millisecond) // past the window: a lower bound
	res, err := q.Enqueue(t.Context(), second)
	if err != nil || res.Existed || res.Message.ID != second.ID {
		t.Fatalf("Enqueue after the window = %+v, %v: want a new message", res, err)
	}
}

// TestMetrics: operations are counted on the given registry, and a queue
// reopened on the same registry shares the metrics instead of failing.
func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	account := freshAccount(t)
	c := redistest.Client(t)
	q := openWith(t, Config{Client: c, Account: account, Registerer: reg})
	enqueue(t, q, msg("p", sms.ClassOTP))
	take(t, q, time.Minute)
	_ = q.Close()
	q2, err := New(Config{Client: c, Account: account, Registerer: reg})
	if err != nil {
		t.Fatalf("New on the same registry: %v", err)
	}
	defer func() { _ = q2.Close() }()
	if _, _, err := q2.Take(t.Context(), queue.TakeOptions{Owner: "w", Lease: time.Minute}); !errors.Is(err, queue.ErrEmpty) {
		t.Fatal(err)
	}
	// Both queues' takes land in the one series.
	if n := sampleCount(t, reg, "smsgw_queue_redis_op_duration_seconds", "take"); n != 2 {
		t.Fatalf("take observations = %d, want 2", n)
	}
	if n := sampleCount(t, reg, "smsgw_queue_redis_op_duration_seconds", "enqueue"); n != 1 {
		t.Fatalf("enqueue observations = %d, want 1", n)
	}
	// An empty queue is an answer, not a Redis failure.
	if n := sampleCount(t, reg, "smsgw_queue_redis_errors_total", "take"); n != 0 {
		t.Fatalf("take errors = %d, want 0", n)
	}
}

func sampleCount(t *testing.T, reg prometheus.Gatherer, name, op string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		if len(mf.GetMetric()) != len(ops) {
			t.Fatalf("%s: %d series, want %d (one per op, created at zero)", name, len(mf.GetMetric()), len(ops))
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op {
					if c := m.GetCounter(); c != nil {
						return uint64(c.GetValue())
					}
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	t.Fatalf("no %s{op=%q}", name, op)
	return 0
}
