package dispatch

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/logtest"
	"smsgw/internal/queue/redisq"
	"smsgw/internal/redistest"
)

// TestTakeFailuresLoggedSampled: with the queue's Redis down every lane's
// take fails on every try; the warning is logged once, then at most once
// per failureLogEvery with the count (an audit saw 52 lines in 55 s from
// one replica, 46 a second from a fleet of 23), while the metric counts
// every failure.
func TestTakeFailuresLoggedSampled(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	acct := account{name: redistest.Prefix(t), client: c}
	q, err := redisq.New(redisq.Config{Client: c, Account: acct.name})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	var logs logtest.Buffer
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, c, defaultLimits), Provider: funcProvider(nil),
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	waitUntil(t, "four failed takes", func() bool { return value(d.m.loopErrors.WithLabelValues("take")) >= 4 })
	if n := strings.Count(logs.String(), `msg="take failed"`); n != 1 {
		t.Errorf("%d take failed lines for %v failures within %s, want 1:\n%s", n, value(d.m.loopErrors.WithLabelValues("take")),
			failureLogEvery, logs.String())
	}
}
