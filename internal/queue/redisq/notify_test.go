package redisq

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

var _ queue.Notifier = (*Queue)(nil)

// listener collects the classes a Listen delivers.
type listener struct {
	mu   sync.Mutex
	got  []sms.Class
	news chan struct{}
	done chan struct{}
	stop context.CancelFunc
}

func listen(t *testing.T, q *Queue) *listener {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{news: make(chan struct{}, 1), done: make(chan struct{}), stop: cancel}
	go func() {
		defer close(l.done)
		q.Listen(ctx, func(c sms.Class) {
			l.mu.Lock()
			l.got = append(l.got, c)
			l.mu.Unlock()
			select {
			case l.news <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-l.done })
	return l
}

// waitFor waits until the listener has received want after its first n
// wake-ups, and returns how many it has now.
func (l *listener) waitFor(t *testing.T, from int, want sms.Class) int {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		l.mu.Lock()
		got := append([]sms.Class(nil), l.got...)
		l.mu.Unlock()
		for i := from; i < len(got); i++ {
			if got[i] == want {
				return len(got)
			}
		}
		select {
		case <-l.news:
		case <-deadline:
			t.Fatalf("no wake-up for %s after the first %d (got %v)", want, from, got)
		}
	}
}

// testWake: a queue of another process enqueues; the listener hears the
// class (after the wake-up of every class that a subscription starts with).
func testWake(t *testing.T, listenOn, enqueueOn *Queue) {
	l := listen(t, listenOn)
	n := l.waitFor(t, 0, sms.ClassMarketing) // subscribed: every class once
	enqueue(t, enqueueOn, msg("p", sms.ClassOTP))
	n = l.waitFor(t, n, sms.ClassOTP)
	enqueue(t, enqueueOn, msg("p", sms.ClassMarketing), msg("p", sms.ClassTransactional))
	l.waitFor(t, n, sms.ClassTransactional)
}

func TestWakeUpOnEnqueue(t *testing.T) {
	a := newShared(t)
	b := open(t, redistest.Client(t), a.account)
	testWake(t, a, b)
}

// A Redis Cluster: the sharded channel lives on the account's slot and the
// publish rides the enqueue's pipeline to that node.
func TestWakeUpOnEnqueueCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	addrs := redistest.StartCluster(t)
	acct := redistest.Prefix(t)
	a := open(t, redistest.ClusterClient(t, addrs), acct)
	b := open(t, redistest.ClusterClient(t, addrs), acct)
	testWake(t, a, b)
	if a.unsharded.Load() || b.unsharded.Load() {
		t.Error("a Redis 7 cluster fell back to unsharded channels")
	}
}

// A wake-up lost while Redis was away is made good by the wake-up of
// every class that the listener's new subscription starts with.
func TestWakeUpAfterReconnect(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	q := open(t, c, redistest.Prefix(t))
	l := listen(t, q)
	n := l.waitFor(t, 0, sms.ClassMarketing)
	srv.Kill()
	srv.Start()
	l.waitFor(t, n, sms.ClassMarketing)
}
