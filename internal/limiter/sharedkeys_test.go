package limiter

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"smsgw/internal/redistest"
)

// sharedKeysFixture is a SharedKeys on a private redis-server (to kill),
// counting the client's script calls, the log and the local decisions.
type sharedKeysFixture struct {
	srv   *redistest.Server
	s     *SharedKeys
	calls *scriptCalls
	logs  *logCounter
	reg   *prometheus.Registry
	local atomic.Int64
}

func newSharedKeysFixture(t *testing.T) *sharedKeysFixture {
	t.Helper()
	f := &sharedKeysFixture{srv: redistest.StartServer(t, redistest.ServerOptions{}), calls: &scriptCalls{},
		logs: &logCounter{}, reg: prometheus.NewRegistry()}
	client := redis.NewClient(productionOptions(f.srv.Addr))
	t.Cleanup(func() { _ = client.Close() })
	client.AddHook(f.calls)
	rk, err := NewRedisKeys(client, redistest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	f.s, err = NewSharedKeys(SharedKeysConfig{Redis: rk, Logger: slog.New(f.logs), Registerer: f.reg,
		OnLocal: func() { f.local.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSharedKeysOutage: the ingress limiter follows the send limiter's
// breaker policy. Redis killed → decisions are taken locally without a
// Redis call each (one failure, then at most one probe a second), never
// fail open, and the mode change is logged once; Redis back → decided on
// Redis again.
func TestSharedKeysOutage(t *testing.T) {
	t.Parallel()
	f := newSharedKeysFixture(t)
	s := f.s
	rate := Rate{PerSecond: 0.1, Burst: 5} // no refill during the test
	if d, err := s.Allow(bg, "up", rate, 1); err != nil || !d.Allowed || s.Mode() != ModeShared || f.calls.n.Load() == 0 {
		t.Fatalf("with Redis up: %+v %v, mode %s, %d Redis calls", d, err, s.Mode(), f.calls.n.Load())
	}

	f.srv.Kill()
	f.calls.n.Store(0)
	const n = 300
	start := time.Now()
	var first time.Duration
	allowed := 0
	for i := range n {
		d, err := s.Allow(bg, "down", rate, 1)
		if err != nil {
			t.Fatalf("decision %d with Redis down: %v", i, err)
		}
		if i == 0 {
			first = time.Since(start)
		}
		if d.Allowed {
			allowed++
		}
		// A Redis call per decision fails here, at once, not 300 calls later.
		if a, limit := f.calls.n.Load(), 2+int64(time.Since(start)/redisRetryEvery); a > limit {
			t.Fatalf("%d Redis attempts for %d decisions in %s, want at most %d (one a second)", a, i+1, time.Since(start), limit)
		}
	}
	elapsed := time.Since(start)
	attempts := f.calls.n.Load()
	t.Logf("Redis down: the first decision (the failing call) took %s; the other %d took %s (%s each); %d Redis attempts in all",
		first.Round(time.Millisecond), n-1, (elapsed - first).Round(time.Millisecond),
		((elapsed - first) / (n - 1)).Round(time.Microsecond), attempts)
	// The first failure opens the breaker; then one probe per second.
	if limit := 2 + int64(elapsed/redisRetryEvery); attempts > limit {
		t.Fatalf("%d Redis attempts for %d decisions in %s, want at most %d (one a second)", attempts, n, elapsed, limit)
	}
	if allowed != rate.Burst {
		t.Fatalf("%d of %d allowed locally, want the burst %d (never fail open)", allowed, n, rate.Burst)
	}
	if s.Mode() != ModeFallback || f.local.Load() != n {
		t.Fatalf("mode %s, %d local decisions counted, want fallback and %d", s.Mode(), f.local.Load(), n)
	}
	if got := metricValue(t, f.reg, "smsgw_limiter_ingress_mode", "mode", "fallback"); got != 1 {
		t.Fatalf("mode gauge fallback = %v", got)
	}
	if w := f.logs.count(slog.LevelWarn, ""); w != 1 {
		t.Fatalf("%d warnings for one outage, want the mode change logged once: %v", w, f.logs.records)
	}
	f.srv.Start()
	f.wantBackOnRedis(t, rate)
}

// wantBackOnRedis waits until s decides on Redis again, then checks that
// every decision calls Redis and none is local.
func (f *sharedKeysFixture) wantBackOnRedis(t *testing.T, rate Rate) {
	t.Helper()
	back := time.Now()
	// A patience, not a latency: one retry a second brings it back in
	// about a second; one that never retries stays local for good.
	for f.s.Mode() != ModeShared {
		if time.Since(back) > 5*time.Second {
			t.Fatalf("still %s %s after Redis came back", f.s.Mode(), time.Since(back))
		}
		if _, err := f.s.Allow(bg, "probe", rate, 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("shared again %s after Redis came back", time.Since(back).Round(time.Millisecond))
	before, localBefore := f.calls.n.Load(), f.local.Load()
	for range 3 {
		if d, err := f.s.Allow(bg, "after", rate, 1); err != nil || !d.Allowed {
			t.Fatalf("after recovery: %+v %v", d, err)
		}
	}
	if got := f.calls.n.Load() - before; got != 3 || f.local.Load() != localBefore {
		t.Fatalf("after recovery: %d Redis calls and %d local decisions for 3 decisions, want 3 and 0",
			got, f.local.Load()-localBefore)
	}
	if got := f.logs.count(slog.LevelInfo, "redis is back"); got != 1 {
		t.Fatalf("recovery logged %d times", got)
	}
	if got := metricValue(t, f.reg, "smsgw_limiter_ingress_mode", "mode", "shared"); got != 1 {
		t.Fatalf("mode gauge shared = %v", got)
	}
}

// TestSharedKeysRefusesBadRequests: a request no key could ever grant is
// refused before Redis and does not open the breaker.
func TestSharedKeysRefusesBadRequests(t *testing.T) {
	t.Parallel()
	rk, err := NewRedisKeys(redistest.Client(t), redistest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSharedKeys(SharedKeysConfig{Redis: rk})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Allow(bg, "p", Rate{PerSecond: 1, Burst: 2}, 3); err != ErrCostExceedsBurst {
		t.Fatalf("cost over the burst: %v", err)
	}
	if _, err := s.Allow(bg, "", Rate{PerSecond: 1, Burst: 2}, 1); err == nil {
		t.Fatal("empty key accepted")
	}
	if s.Mode() != ModeShared {
		t.Fatalf("mode %s after refused requests", s.Mode())
	}
	if _, err := NewSharedKeys(SharedKeysConfig{}); err == nil {
		t.Fatal("NewSharedKeys without Redis accepted")
	}
}
