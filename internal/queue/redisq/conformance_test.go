package redisq

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
	"smsgw/internal/queue"
	"smsgw/internal/queue/queuetest"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// TestConformance runs the queue suite against the shared Redis; every
// MultiClient handle has its own *redis.Client (its own connections).
func TestConformance(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	queuetest.Run(t, queuetest.Harness{
		New: func(t *testing.T) queue.Queue { return newShared(t) },
		Reopen: func(t *testing.T, q queue.Queue) queue.Queue {
			old := q.(*Queue)
			_ = old.Close()
			return open(t, newClient(t, addr), old.account)
		},
		MultiClient: func(t *testing.T, q queue.Queue, n int) []queue.Queue {
			out := make([]queue.Queue, n)
			for i := range out {
				out[i] = open(t, newClient(t, addr), q.(*Queue).account)
			}
			return out
		},
		Suppressions: func(t *testing.T, q queue.Queue) (queue.Suppression, func(string)) {
			return redisSuppressions(t, q.(*Queue))
		},
	})
}

// redisSuppressions is the gateway's suppression list of Redis mode
// (state.RedisSuppressions) beside q, read by the take script through its
// key as the gateway wires it.
func redisSuppressions(t *testing.T, q *Queue) (queue.Suppression, func(string)) {
	t.Helper()
	sp, err := keyspace.New(q.account)
	if err != nil {
		t.Fatal(err)
	}
	l, err := state.NewRedisSuppressions(q.c, sp, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = q.c.Del(ctx, l.IndexKey(), l.IndexKey()+":index").Err()
	})
	add := func(id string) {
		if _, err := l.Add(t.Context(), state.Suppression{ID: id, Masked: "+8190****5678", Source: state.SourceRecipient}); err != nil {
			t.Fatalf("suppress %s: %v", id, err)
		}
	}
	return queue.Suppression{Key: l.IndexKey()}, add
}

// TestConformanceCluster runs the same suite against a real 3-master Redis
// Cluster: a script whose keys spanned slots would fail with CROSSSLOT, and
// the accounts of the cases land on different masters.
func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	addrs := redistest.StartCluster(t)
	clusterClient := func(t *testing.T) *redis.ClusterClient { return redistest.ClusterClient(t, addrs) }
	// redistest's cluster nodes run without AOF: every master is asked.
	if aof, err := open(t, clusterClient(t), "persist").CheckPersistence(t.Context()); err != nil || aof {
		t.Fatalf("CheckPersistence on a cluster without AOF = %v, %v: want false", aof, err)
	}
	queuetest.Run(t, queuetest.Harness{
		New: func(t *testing.T) queue.Queue {
			return open(t, clusterClient(t), redistest.Prefix(t))
		},
		Reopen: func(t *testing.T, q queue.Queue) queue.Queue {
			old := q.(*Queue)
			_ = old.Close()
			return open(t, clusterClient(t), old.account)
		},
		MultiClient: func(t *testing.T, q queue.Queue, n int) []queue.Queue {
			out := make([]queue.Queue, n)
			for i := range out {
				out[i] = open(t, clusterClient(t), q.(*Queue).account)
			}
			return out
		},
		Suppressions: func(t *testing.T, q queue.Queue) (queue.Suppression, func(string)) {
			return redisSuppressions(t, q.(*Queue))
		},
	})
}

func newClient(t testing.TB, addr string) *redis.Client {
	return clientWith(t, redis.Options{Addr: addr})
}

// clientWith is a client with options o, closed when the test ends.
func clientWith(t testing.TB, o redis.Options) *redis.Client {
	c := redis.NewClient(&o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// compacting is a queue that compacts its final records before every
// call that reads one (Get, receipts, Cancel, enqueues with their replays
// and retried ids), so that the suite reads compacted records (blobs)
// instead of LISTs. (Compacting after every Complete instead would merge
// a growing blob per completion: quadratic in the suite's bulk cases.)
type compacting struct{ *Queue }

func (c compacting) compactAll(ctx context.Context) error {
	for {
		n, err := c.Compact(ctx, 1000)
		if err != nil || n == 0 {
			return err
		}
	}
}

func (c compacting) Get(ctx context.Context, id string) (*sms.Message, error) {
	if err := c.compactAll(ctx); err != nil {
		return nil, err
	}
	return c.Queue.Get(ctx, id)
}

func (c compacting) ApplyReceipt(ctx context.Context, r queue.Receipt) (queue.ReceiptOutcome, error) {
	if err := c.compactAll(ctx); err != nil {
		return queue.ReceiptOutcome{}, err
	}
	return c.Queue.ApplyReceipt(ctx, r)
}

func (c compacting) Cancel(ctx context.Context, id, producer string) (*sms.Message, error) {
	if err := c.compactAll(ctx); err != nil {
		return nil, err
	}
	return c.Queue.Cancel(ctx, id, producer)
}

func (c compacting) Enqueue(ctx context.Context, m *sms.Message) (queue.EnqueueResult, error) {
	if err := c.compactAll(ctx); err != nil {
		return queue.EnqueueResult{}, err
	}
	return c.Queue.Enqueue(ctx, m)
}

func (c compacting) EnqueueMany(ctx context.Context, ms []*sms.Message) ([]queue.EnqueueResult, error) {
	if err := c.compactAll(ctx); err != nil {
		return nil, err
	}
	return c.Queue.EnqueueMany(ctx, ms)
}

func (c compacting) EnqueueChecked(ctx context.Context, cs []queue.Checked) ([]queue.CheckedResult, error) {
	if err := c.compactAll(ctx); err != nil {
		return nil, err
	}
	return c.Queue.EnqueueChecked(ctx, cs)
}

// openCompacting is open with a CompactAfter so short that every second
// is due at once.
func openCompacting(t testing.TB, c redis.UniversalClient, account string) compacting {
	t.Helper()
	q, err := New(Config{Client: c, Account: account, Logger: testLogger(t), CompactAfter: time.Nanosecond})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return compacting{q}
}

// TestConformanceCompacted runs the suite with every final record
// compacted as soon as it is written (compacting).
func TestConformanceCompacted(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	queuetest.Run(t, queuetest.Harness{
		New: func(t *testing.T) queue.Queue {
			return openCompacting(t, redistest.Client(t), freshAccount(t))
		},
		Reopen: func(t *testing.T, q queue.Queue) queue.Queue {
			old := q.(compacting)
			_ = old.Close()
			return openCompacting(t, newClient(t, addr), old.account)
		},
		MultiClient: func(t *testing.T, q queue.Queue, n int) []queue.Queue {
			out := make([]queue.Queue, n)
			for i := range out {
				out[i] = openCompacting(t, newClient(t, addr), q.(compacting).account)
			}
			return out
		},
		Suppressions: func(t *testing.T, q queue.Queue) (queue.Suppression, func(string)) {
			return redisSuppressions(t, q.(compacting).Queue)
		},
	})
}

// TestShelf runs the set-aside cases; the pause is the gateway's scoped
// pause in Redis (state.RedisScopedPauses), which the script reads.
func TestShelf(t *testing.T) {
	t.Parallel()
	redistest.Addr(t)
	queuetest.RunShelf(t, queuetest.ShelfHarness{
		New: func(t *testing.T) queue.Queue { return newShared(t) },
		Pause: func(t *testing.T, q queue.Queue, producer string, on bool) queue.Shelf {
			p := scopedPauses(t, q.(*Queue))
			scope := state.ProducerScope(producer)
			var err error
			if on {
				err = p.Set(t.Context(), scope, 0, "")
			} else {
				err = p.Clear(t.Context(), scope)
			}
			if err != nil {
				t.Fatal(err)
			}
			return queue.Shelf{Key: p.Key(), Field: scope}
		},
	})
}

// scopedPauses returns the gateway's scoped pauses of q's account
// (state.RedisScopedPauses), whose HASH is deleted when the test ends.
func scopedPauses(tb testing.TB, q *Queue) *state.RedisScopedPauses {
	tb.Helper()
	sp, err := keyspace.New(q.account)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := state.NewRedisScopedPauses(q.c, sp)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = q.c.Del(context.Background(), p.Key()).Err() })
	return p
}

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
