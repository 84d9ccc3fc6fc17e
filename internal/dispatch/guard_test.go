package dispatch

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
	"smsgw/internal/provider"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// guard returns a Guard counting in the account's shared 429 window
// (internal/state, as the gateway wires it) over c (nil: the account's
// client).
func (a account) guard(t testing.TB, c redis.UniversalClient, cfg GuardConfig) Guard {
	t.Helper()
	if c == nil {
		c = a.client
	}
	sp, err := keyspace.New(a.name)
	if err != nil {
		t.Fatal(err)
	}
	w, err := state.NewRedisThrottles(c, sp, 10*time.Minute)
	return mustGuard(t, w, err, cfg)
}

// localGuard returns a Guard counting in this process (embedded mode).
func localGuard(t testing.TB, cfg GuardConfig) Guard {
	t.Helper()
	w, err := state.NewLocalThrottles(10 * time.Minute)
	return mustGuard(t, w, err, cfg)
}

// mustGuard is the Guard with cfg over the 429 window w, whose
// construction returned err.
func mustGuard(t testing.TB, w state.Throttles, err error, cfg GuardConfig) Guard {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGuard(w, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestGuardPolicy: the guard is active from ceil(Share · Threshold) 429s
// and counts in the window it was given.
func TestGuardPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  GuardConfig
		want int
	}{
		{GuardConfig{}, 150},
		{GuardConfig{Threshold: 10, Share: 0.5}, 5},
		{GuardConfig{Threshold: 7, Share: 0.5}, 4},
		{GuardConfig{Threshold: 1, Share: 0.01}, 1},
		{GuardConfig{Threshold: 300, Share: 1}, 300},
	} {
		if got := localGuard(t, tc.cfg).ActivateAt(); got != tc.want {
			t.Errorf("%+v: ActivateAt %d, want %d", tc.cfg, got, tc.want)
		}
	}
	g := localGuard(t, GuardConfig{Threshold: 10})
	for i := range 3 {
		if n, err := g.Record429(context.Background()); err != nil || n != i+1 {
			t.Fatalf("Record429 = %d, %v; want %d", n, err, i+1)
		}
	}
	if n, err := g.Count(context.Background()); err != nil || n != 3 {
		t.Fatalf("Count = %d, %v; want 3", n, err)
	}
}

func TestGuardConfigInvalid(t *testing.T) {
	t.Parallel()
	w, err := state.NewLocalThrottles(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []GuardConfig{{Share: 1.5}, {Threshold: -1}, {Share: -0.1}} {
		if _, err := NewGuard(w, c); err == nil {
			t.Errorf("NewGuard(%+v) accepted an invalid config", c)
		}
	}
	if _, err := NewGuard(nil, GuardConfig{}); err == nil {
		t.Error("NewGuard without a window accepted")
	}
}

// TestGuardSlowsEveryReplica: once the shared 429 count passes the share of
// the suspension threshold, every replica (not only the one that saw the
// 429s) reserves at GuardSlowdown times the cost, so the account's real
// send rate halves, and the gauge says so.
func TestGuardSlowsEveryReplica(t *testing.T) {
	t.Parallel()
	const rate, n = 40.0, 40
	acct := newAccount(t)
	q := acct.queue(t, nil)
	gcfg := GuardConfig{Threshold: 4, Share: 0.5} // active from 2
	var (
		mu    sync.Mutex
		times []time.Time
	)
	p := funcProvider(func(ctx context.Context, req *provider.Request) (provider.Result, error) {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		return provider.Result{ProviderID: "ok"}, nil
	})
	var reps []*Dispatcher
	for i := range 2 {
		g := acct.guard(t, nil, gcfg)
		d, _ := newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, nil, limiterConfig(rate, 5)), Provider: p,
			Guard: g, Owner: fmt.Sprint("r", i), GuardRefresh: 20 * time.Millisecond})
		reps = append(reps, d)
	}
	other := acct.guard(t, nil, gcfg) // 429s seen by a third replica
	for range 2 {
		if _, err := other.Record429(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "both replicas to see the guard", func() bool { return reps[0].GuardActive() && reps[1].GuardActive() })
	for _, d := range reps {
		if v := value(d.m.guardActive); v != 1 {
			t.Errorf("smsgw_dispatch_suspension_guard_active = %v, want 1", v)
		}
	}
	ids := enqueueN(t, q, n, sms.ClassTransactional)
	waitTerminal(t, q, ids...)
	mu.Lock()
	defer mu.Unlock()
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	got := float64(len(times)-1) / times[len(times)-1].Sub(times[0]).Seconds()
	t.Logf("rate with the guard active: %.1f/s (limiter %.0f/s)", got, rate)
	if got > rate/2*1.15 {
		t.Errorf("sent at %.1f/s with the guard active, want about %.0f/s (half of %.0f/s)", got, rate/2, rate)
	}
}
