package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/provider"
	"smsgw/internal/queue/redisq"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

// TestRedisOutageAfterSend: Redis (with AOF) goes away right after the
// provider accepted a message and comes back a second later. The send loop
// keeps retrying the completion while the lease holds, so the message ends
// sent and the provider is not asked twice.
func TestRedisOutageAfterSend(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{AppendOnly: true})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	acct := account{name: redistest.Prefix(t), client: c}
	q, err := redisq.New(redisq.Config{Client: c, Account: acct.name})
	if err != nil {
		t.Fatal(err)
	}
	m := newMsg(sms.ClassTransactional)
	enqueue(t, q, m)

	called, stopped := make(chan struct{}, 8), make(chan struct{})
	rec := newRecorder(funcProvider(func(context.Context, *provider.Request) (provider.Result, error) {
		called <- struct{}{}
		<-stopped
		return provider.Result{ProviderID: "accepted"}, nil
	}))
	newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, c, defaultLimits), Provider: rec, Lease: 10 * time.Second})
	<-called
	srv.Stop()
	close(stopped)
	time.Sleep(time.Second)
	srv.Start()

	got := waitTerminal(t, q, m.ID)[m.ID]
	if got.Status != sms.StatusSent || got.ProviderID != "accepted" {
		t.Errorf("message %s (%q) after the outage, want sent", got.Status, got.ProviderID)
	}
	if calls := rec.calls(); len(calls) != 1 {
		t.Errorf("provider called %d times, want once", len(calls))
	}
}
