package redisq

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/queue/queuetest"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// countedQueue is a queue on the shared Redis whose client counts round trips.
func countedQueue(tb testing.TB) (*Queue, *redistest.RoundTrips) {
	tb.Helper()
	c := newClient(tb, redistest.Addr(tb))
	h := &redistest.RoundTrips{}
	c.AddHook(h)
	return newWith(tb, Config{Client: c, Logger: slog.New(slog.DiscardHandler)}), h
}

// deliver is what the send loop does with the queue for one message.
func deliver(tb testing.TB, q *Queue) {
	ctx := context.Background()
	l, _, err := q.Take(ctx, queue.TakeOptions{Owner: "bench", Lease: time.Minute})
	if err != nil {
		tb.Fatalf("Take: %v", err)
	}
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm", Attempts: 1}); err != nil {
		tb.Fatalf("Complete: %v", err)
	}
}

// TestRoundTripsPerDelivery pins the queue's share of the send loop's budget
// (≤ 4 round trips per delivered message, the limiter taking 1): Take and
// Complete are one script each once the scripts are cached by Redis.
func TestRoundTripsPerDelivery(t *testing.T) {
	t.Parallel()
	q, h := countedQueue(t)
	enqueue(t, q, msg("p", sms.ClassOTP), msg("p", sms.ClassOTP))
	deliver(t, q) // loads the scripts (EVALSHA miss, then EVAL) on a fresh server
	start := h.N()
	deliver(t, q)
	if n := h.N() - start; n != 2 {
		t.Fatalf("Take + Complete = %d round trips, want 2", n)
	}
}

func BenchmarkEnqueueParallel(b *testing.B) {
	q, h := countedQueue(b)
	start := h.N()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := q.Enqueue(context.Background(), msg("p", sms.ClassMarketing)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(h.N()-start)/float64(b.N), "roundtrips/op")
}

func BenchmarkEnqueueMany100(b *testing.B) {
	q, _ := countedQueue(b)
	batch := make([]*sms.Message, 100)
	b.ReportAllocs()
	for b.Loop() {
		for i := range batch {
			batch[i] = msg("p", sms.ClassMarketing)
		}
		if _, err := q.EnqueueMany(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkTakeComplete is one delivery's queue work (Take + Complete) on a
// queue holding b.N messages.
func BenchmarkTakeComplete(b *testing.B) {
	q, h := countedQueue(b)
	b.ReportAllocs()
	deliveries(b, q, h)
}

// deliveries fills q with b.N+1 messages and times b.N deliveries of them
// after one that warms the script cache, reported in round trips each.
func deliveries(b *testing.B, q *Queue, h *redistest.RoundTrips) {
	fill(b, q, b.N+1)
	deliver(b, q) // script cache warm
	start := h.N()
	b.ResetTimer()
	for range b.N {
		deliver(b, q)
	}
	b.StopTimer()
	b.ReportMetric(float64(h.N()-start)/float64(b.N), "roundtrips/op")
}

// BenchmarkTakeCompleteParallel is deliveries by concurrent senders.
func BenchmarkTakeCompleteParallel(b *testing.B) {
	q, h := countedQueue(b)
	fill(b, q, b.N+1)
	deliver(b, q)
	start := h.N()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			deliver(b, q)
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(h.N()-start)/float64(b.N), "roundtrips/op")
}

func fill(b *testing.B, q *Queue, n int) {
	b.Helper()
	for n > 0 {
		batch := make([]*sms.Message, min(n, maxBatch))
		for i := range batch {
			batch[i] = msg("p", sms.Classes[i%3])
		}
		if _, err := q.EnqueueMany(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
		n -= len(batch)
	}
}

// BenchmarkEnqueueCheckedBatch is the accept path's queue work as the
// gateway's coalescer hands it over under load: batches of one producer's
// messages, each with every check (stored answer, idempotency key,
// suppression list, max_outstanding, ingress GCRA), on a private Redis
// server. It reports Redis's own CPU per message (redis-cpu-us/msg, from
// INFO cpu), which load elsewhere on the machine moves far less than the
// wall clock, and Redis commands per message (the script's calls included).
func BenchmarkEnqueueCheckedBatch(b *testing.B) {
	for _, size := range []int{1, 16} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			srv := redistest.StartServer(b, redistest.ServerOptions{})
			c := newClient(b, srv.Addr)
			q, err := New(Config{Client: c, Account: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = q.Close() }()
			ctx := context.Background()
			batch := make([]queue.Checked, size)
			n := 0
			next := func() {
				for i := range batch {
					n++
					m := msg("p", sms.ClassMarketing)
					m.IdempotencyKey = "k" + strconv.Itoa(n)
					batch[i] = queue.Checked{Message: m, Checks: queue.Checks{
						AnswerKey: q.k.tag + "answer:" + m.IdempotencyKey, Answer: []byte(`{"id":"` + m.ID + `","status":"queued"}`), AnswerTTL: time.Hour,
						SuppressionKey: q.k.tag + "sup", SuppressionID: "n" + strconv.Itoa(n),
						MaxOutstanding: 1 << 40,
						IngressKey:     q.k.tag + "gcra:p", IngressInterval: 1, IngressBurst: 1 << 40, IngressCost: 1,
					}}
				}
			}
			next()
			if _, err := q.EnqueueChecked(ctx, batch); err != nil { // scripts loaded
				b.Fatal(err)
			}
			cpu0, cmds0 := redistest.ServerCPU(b, c), redisCommands(b, c)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				next()
				b.StartTimer()
				res, err := q.EnqueueChecked(ctx, batch)
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range res {
					if r.Err != nil || r.Refused != queue.NotRefused || r.Message == nil {
						b.Fatalf("not stored: %+v", r)
					}
				}
			}
			b.StopTimer()
			msgs := float64(b.N * size)
			b.ReportMetric(float64((redistest.ServerCPU(b, c)-cpu0).Nanoseconds())/1e3/msgs, "redis-cpu-us/msg")
			b.ReportMetric(float64(redisCommands(b, c)-cmds0)/msgs, "redis-cmds/msg")
		})
	}
}

// redisCommands is the number of commands the server behind c has run,
// the scripts' own calls included.
func redisCommands(b *testing.B, c *redis.Client) int64 {
	_, total := redistest.CommandStats(b, c)
	return total
}

// BenchmarkTakePastShelf is one delivery's queue work (Take + Complete)
// with a paused producer's backlog on its shelf ahead of it in line: a
// take costs the same however many messages wait on the shelf.
func BenchmarkTakePastShelf(b *testing.B) {
	for _, shelved := range []int{0, 5000} {
		b.Run(fmt.Sprintf("shelved=%d", shelved), func(b *testing.B) {
			q, h := countedQueue(b)
			ctx := context.Background()
			p := scopedPauses(b, q)
			scope := state.ProducerScope("paused")
			if err := p.Set(ctx, scope, 0, ""); err != nil {
				b.Fatal(err)
			}
			for n := shelved; n > 0; {
				batch := make([]*sms.Message, min(n, maxBatch))
				for i := range batch {
					batch[i] = msg("paused", sms.ClassMarketing)
				}
				if _, err := q.EnqueueMany(ctx, batch); err != nil {
					b.Fatal(err)
				}
				n -= len(batch)
			}
			for range shelved {
				l, _, err := q.Take(ctx, queue.TakeOptions{Owner: "bench", Lease: time.Minute})
				if err != nil {
					b.Fatal(err)
				}
				if err := q.SetAside(ctx, l, queue.Shelf{Key: p.Key(), Field: scope}); err != nil {
					b.Fatal(err)
				}
			}
			deliveries(b, q, h)
		})
	}
}

// BenchmarkTakeBehindSlowSender: a take of another sender's message behind
// a held 1/s sender's backlog of 1,000 and of 100,000 messages
// (queuetest.TakeBehindHeldSender): the same cost, one round trip.
func BenchmarkTakeBehindSlowSender(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("backlog=%d", n), func(b *testing.B) {
			q, _ := countedQueue(b)
			queuetest.TakeBehindHeldSender(b, q, n)
		})
	}
}
