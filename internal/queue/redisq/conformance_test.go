package redisq

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/queue/queuetest"
	"smsgw/internal/redistest"
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
	})
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
	})
}

func newClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
