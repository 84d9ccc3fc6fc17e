package dispatch

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// TestRedisGuardScript is a state table for the guard script on real Redis:
// seed the 429 log relative to Redis time, call, compare the whole log.
func TestRedisGuardScript(t *testing.T) {
	t.Parallel()
	const window = 10 * time.Minute
	cases := []struct {
		name      string
		seedAgo   []time.Duration // 429s this long before Redis now
		record    bool
		wantCount int
		wantKept  int // seeded entries left after the trim
	}{
		{name: "empty count", wantCount: 0},
		{name: "empty record", record: true, wantCount: 1},
		{name: "trims only what left the window", seedAgo: []time.Duration{11 * time.Minute, window + time.Millisecond, 9 * time.Minute, time.Second},
			wantCount: 2, wantKept: 2},
		{name: "record on a trimmed log", seedAgo: []time.Duration{20 * time.Minute, time.Minute}, record: true, wantCount: 2, wantKept: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			acct := newAccount(t)
			ctx := context.Background()
			g, err := NewRedisGuard(acct.client, acct.name, GuardConfig{Window: window})
			if err != nil {
				t.Fatal(err)
			}
			now, err := acct.client.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			key := newDispatchKeys(acct.name).throttles()
			var kept []string
			for i, ago := range tc.seedAgo {
				at := now.Add(-ago).UnixMicro()
				member := fmt.Sprintf("%d:seed%d", at, i)
				if err := acct.client.ZAdd(ctx, key, redis.Z{Score: float64(at), Member: member}).Err(); err != nil {
					t.Fatal(err)
				}
				if ago < window {
					kept = append(kept, member)
				}
			}
			var n int
			if tc.record {
				n, err = g.Record429(ctx)
			} else {
				n, err = g.Count(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.wantCount {
				t.Errorf("count %d, want %d", n, tc.wantCount)
			}
			all, err := acct.client.ZRange(ctx, key, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(all) != tc.wantCount {
				t.Errorf("log holds %v, want %d entries", all, tc.wantCount)
			}
			got := map[string]bool{}
			for _, m := range all {
				got[m] = true
			}
			for _, m := range kept {
				if !got[m] {
					t.Errorf("entry %s inside the window was trimmed", m)
				}
			}
			if len(kept) != tc.wantKept {
				t.Fatalf("test table: %d seeded entries inside the window, want %d", len(kept), tc.wantKept)
			}
			if tc.record {
				ttl, err := acct.client.PTTL(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				if ttl <= window-time.Minute || ttl > window {
					t.Errorf("log TTL %s, want about the window %s", ttl, window)
				}
			}
		})
	}
}

// TestRedisGuardShared: 429s recorded concurrently by several replicas land
// in one count, each counted once.
func TestRedisGuardShared(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	var wg sync.WaitGroup
	for range 3 {
		c := redis.NewClient(&redis.Options{Addr: acct.client.Options().Addr})
		defer c.Close()
		g, err := NewRedisGuard(c, acct.name, GuardConfig{})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for range 20 {
				if _, err := g.Record429(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	g, _ := NewRedisGuard(acct.client, acct.name, GuardConfig{})
	if n, err := g.Count(context.Background()); err != nil || n != 60 {
		t.Errorf("Count = %d, %v; want 60", n, err)
	}
}

func TestLocalGuard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := NewLocalGuard(GuardConfig{Threshold: 10, Share: 0.5})
		if err != nil {
			t.Fatal(err)
		}
		if g.ActivateAt() != 5 {
			t.Errorf("ActivateAt %d, want 5", g.ActivateAt())
		}
		ctx := context.Background()
		for range 3 {
			_, _ = g.Record429(ctx)
		}
		time.Sleep(5 * time.Minute)
		if n, _ := g.Record429(ctx); n != 4 {
			t.Errorf("count %d, want 4", n)
		}
		time.Sleep(5 * time.Minute) // the first three are exactly one window old: out
		if n, _ := g.Count(ctx); n != 1 {
			t.Errorf("count after 10 min %d, want 1", n)
		}
		time.Sleep(5 * time.Minute)
		if n, _ := g.Count(ctx); n != 0 {
			t.Errorf("count after 15 min %d, want 0", n)
		}
	})
}

func TestGuardConfigInvalid(t *testing.T) {
	for _, c := range []GuardConfig{{Share: 1.5}, {Threshold: -1}, {Window: -time.Second}} {
		if _, err := NewLocalGuard(c); err == nil {
			t.Errorf("NewLocalGuard(%+v) accepted an invalid config", c)
		}
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
		g, err := NewRedisGuard(acct.client, acct.name, gcfg)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, nil, limiterConfig(rate, 5)), Provider: p,
			Guard: g, Owner: fmt.Sprint("r", i), GuardRefresh: 20 * time.Millisecond})
		reps = append(reps, d)
	}
	other, _ := NewRedisGuard(acct.client, acct.name, gcfg) // 429s seen by a third replica
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
	ms := make([]*sms.Message, n)
	ids := make([]string, n)
	for i := range ms {
		ms[i] = newMsg(sms.ClassTransactional)
		ids[i] = ms[i].ID
	}
	enqueue(t, q, ms...)
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
