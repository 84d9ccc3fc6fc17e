package embedded

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/queue/queuetest"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
)

func benchMsg(c sms.Class) *sms.Message { return smstest.Message("bench", c) }

func reportRate(b *testing.B, msgs int) {
	b.ReportMetric(float64(msgs)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkEnqueueSerial is one caller: one fsync per message.
func BenchmarkEnqueueSerial(b *testing.B) {
	q := open(b, Config{})
	ctx := b.Context()
	for b.Loop() {
		if _, err := q.Enqueue(ctx, benchMsg(sms.ClassMarketing)); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N)
}

// BenchmarkEnqueueParallel64 is 64 concurrent callers sharing commits.
func BenchmarkEnqueueParallel64(b *testing.B) {
	q := open(b, Config{})
	ctx := b.Context()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := q.Enqueue(ctx, benchMsg(sms.ClassMarketing)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportRate(b, b.N)
}

func BenchmarkEnqueueMany100(b *testing.B) {
	q := open(b, Config{})
	ctx := b.Context()
	for b.Loop() {
		ms := make([]*sms.Message, 100)
		for i := range ms {
			ms[i] = benchMsg(sms.ClassMarketing)
		}
		if _, err := q.EnqueueMany(ctx, ms); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N*100)
}

func prefill(b *testing.B, q *Queue, n int) {
	b.Helper()
	for n > 0 {
		ms := make([]*sms.Message, min(n, 1000))
		for i := range ms {
			ms[i] = benchMsg(sms.Classes[i%3])
		}
		if _, err := q.EnqueueMany(b.Context(), ms); err != nil {
			b.Fatal(err)
		}
		n -= len(ms)
	}
}

// BenchmarkTakeComplete is one worker: take, then complete.
func BenchmarkTakeComplete(b *testing.B) {
	q := open(b, Config{})
	ctx := b.Context()
	prefill(b, q, b.N)
	b.ResetTimer()
	for range b.N {
		l, _, err := q.Take(ctx, queue.TakeOptions{Owner: "bench", Lease: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, Attempts: 1}); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N)
}

// BenchmarkTakeCompleteParallel8 is eight workers, as a dispatcher runs.
func BenchmarkTakeCompleteParallel8(b *testing.B) {
	q := open(b, Config{})
	ctx := b.Context()
	prefill(b, q, b.N)
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				l, _, err := q.Take(ctx, queue.TakeOptions{Owner: "bench", Lease: time.Minute})
				if errors.Is(err, queue.ErrEmpty) {
					return
				}
				if err != nil {
					b.Error(err)
					return
				}
				if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, Attempts: 1}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	reportRate(b, b.N)
}

// BenchmarkTakeBehindSlowSender: a take of another sender's message behind
// a held 1/s sender's backlog of 1,000 and of 100,000 messages
// (queuetest.TakeBehindHeldSender): the same cost.
func BenchmarkTakeBehindSlowSender(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("backlog=%d", n), func(b *testing.B) {
			queuetest.TakeBehindHeldSender(b, open(b, Config{}), n)
		})
	}
}
