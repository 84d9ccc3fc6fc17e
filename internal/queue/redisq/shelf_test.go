package redisq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"smsgw/internal/keyspace"
	"smsgw/internal/queue"
	"smsgw/internal/queue/queuetest"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// TestShelf runs the set-aside cases; the pause is the gateway's scoped
// pause in Redis (state.RedisScopedPauses), which the script reads.
func TestShelf(t *testing.T) {
	t.Parallel()
	redistest.Addr(t)
	queuetest.RunShelf(t, queuetest.ShelfHarness{
		New: func(t *testing.T) queue.Queue { return newShared(t) },
		Pause: func(t *testing.T, q queue.Queue, producer string, on bool) queue.Shelf {
			rq := q.(*Queue)
			sp, err := keyspace.New(rq.account)
			if err != nil {
				t.Fatal(err)
			}
			p, err := state.NewRedisScopedPauses(rq.c, sp)
			if err != nil {
				t.Fatal(err)
			}
			scope := state.ProducerScope(producer)
			if on {
				err = p.Set(t.Context(), scope, 0, "")
			} else {
				err = p.Clear(t.Context(), scope)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rq.c.Del(context.Background(), p.Key()).Err() })
			return queue.Shelf{Key: p.Key(), Field: scope}
		},
	})
}

// BenchmarkTakePastShelf is one delivery's queue work (Take + Complete)
// with a paused producer's backlog on its shelf ahead of it in line: a
// take costs the same however many messages wait on the shelf.
func BenchmarkTakePastShelf(b *testing.B) {
	for _, shelved := range []int{0, 5000} {
		b.Run(fmt.Sprintf("shelved=%d", shelved), func(b *testing.B) {
			q, h := countedQueue(b)
			ctx := context.Background()
			sp, err := keyspace.New(q.account)
			if err != nil {
				b.Fatal(err)
			}
			p, err := state.NewRedisScopedPauses(q.c, sp)
			if err != nil {
				b.Fatal(err)
			}
			scope := state.ProducerScope("paused")
			if err := p.Set(ctx, scope, 0, ""); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = q.c.Del(context.Background(), p.Key()).Err() })
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
			fill(b, q, b.N+1)
			deliver(b, q) // script cache warm
			start := h.N()
			b.ResetTimer()
			for range b.N {
				deliver(b, q)
			}
			b.StopTimer()
			b.ReportMetric(float64(h.N()-start)/float64(b.N), "roundtrips/op")
		})
	}
}
