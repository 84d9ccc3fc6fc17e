package redisq

import (
	"context"
	"testing"

	"smsgw/internal/keyspace"
	"smsgw/internal/queue"
	"smsgw/internal/queue/queuetest"
	"smsgw/internal/redistest"
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
