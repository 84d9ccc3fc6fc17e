package redisq

import (
	"context"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

// countedQueue is a queue on the shared Redis whose client counts round trips.
func countedQueue(tb testing.TB) (*Queue, *redistest.RoundTrips) {
	tb.Helper()
	c := newClient(tb, redistest.Addr(tb))
	h := &redistest.RoundTrips{}
	c.AddHook(h)
	account := redistest.Prefix(tb)
	tb.Cleanup(func() { deleteAccount(tb, account) })
	q, err := New(Config{Client: c, Account: account})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = q.Close() })
	return q, h
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
	fill(b, q, b.N+1)
	deliver(b, q) // script cache warm
	start := h.N()
	b.ReportAllocs()
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
