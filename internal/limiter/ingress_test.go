package limiter

import (
	"errors"
	"testing"
	"time"

	"smsgw/internal/redistest"
)

func keyLimiters(t *testing.T) (map[string]KeyLimiter, *fakeClock) {
	t.Helper()
	clock := &fakeClock{}
	clock.us.Store(5_000_000)
	local := NewLocalKeys()
	local.clock = clock.now
	rk, err := NewRedisKeys(redistest.Client(t), redistest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]KeyLimiter{"local": local, "redis": rk}, clock
}

// spendBurst spends key's whole burst, failing t if any request is refused.
func spendBurst(t *testing.T, l KeyLimiter, key string, rate Rate) {
	t.Helper()
	for i := range rate.Burst {
		if d, err := l.Allow(bg, key, rate, 1); err != nil || !d.Allowed {
			t.Fatalf("request %d within the burst: %+v %v", i, d, err)
		}
	}
}

// eachKeyLimiter runs test on the local and the Redis key limiter, one
// after the other, once key has spent its burst of rate on it.
func eachKeyLimiter(t *testing.T, key string, rate Rate, test func(t *testing.T, name string, l KeyLimiter, clock *fakeClock)) {
	t.Helper()
	lims, clock := keyLimiters(t)
	for name, l := range lims {
		t.Run(name, func(t *testing.T) {
			spendBurst(t, l, key, rate)
			test(t, name, l, clock)
		})
	}
}

// waitOut lets d pass: on the local limiter's fake clock, or in real time
// for Redis, which reads its own clock.
func waitOut(name string, clock *fakeClock, d time.Duration) {
	if name == "local" {
		clock.advance(d)
		return
	}
	time.Sleep(d)
}

// TestKeyLimiterDenialChangesNothing: a client that keeps retrying while
// limited is let in as soon as its burst has refilled; denials never push
// the schedule further out.
func TestKeyLimiterDenialChangesNothing(t *testing.T) {
	t.Parallel()
	// One slot every 2 s: on Redis (its own clock) the denials below must
	// all land before the next slot, however slow a loaded machine makes
	// each call.
	const interval = 2 * time.Second
	rate := Rate{PerSecond: 0.5, Burst: 2}
	eachKeyLimiter(t, "p1", rate, func(t *testing.T, name string, l KeyLimiter, clock *fakeClock) {
		var last KeyDecision
		for range 20 {
			d, err := l.Allow(bg, "p1", rate, 1)
			if err != nil || d.Allowed {
				t.Fatalf("over the burst: %+v %v", d, err)
			}
			if d.RetryAfter > interval {
				t.Fatalf("denials pushed the retry to %s, want at most one interval (%s)", d.RetryAfter, interval)
			}
			last = d
		}
		waitOut(name, clock, last.RetryAfter)
		if d, err := l.Allow(bg, "p1", rate, 1); err != nil || !d.Allowed {
			t.Fatalf("after the retry-after: %+v %v", d, err)
		}
		// Another key is untouched.
		if d, _ := l.Allow(bg, "p2", rate, 2); !d.Allowed {
			t.Fatal("a second key was limited by the first")
		}
	})
}

// TestKeyLimiterClockStepBack: a key's TAT an hour ahead, as Redis's clock
// stepping back an hour leaves it (or a failover to a replica whose clock is
// an hour behind), refuses the key for one interval, not for the hour: the
// TAT is lowered to the furthest an allowed request can leave it (now +
// burst·interval) and stored, so the key counts as having just spent its
// burst. The local twin never sees a step (monotonic clock); its stored TAT
// is raised by the same hour.
func TestKeyLimiterClockStepBack(t *testing.T) {
	t.Parallel()
	const interval = 100 * time.Millisecond
	rate := Rate{PerSecond: 10, Burst: 2}
	eachKeyLimiter(t, "p", rate, func(t *testing.T, name string, l KeyLimiter, clock *fakeClock) {
		hour := time.Hour.Microseconds()
		switch l := l.(type) {
		case *LocalKeys:
			l.tats["p"] += hour
		case *RedisKeys:
			key := l.KeyName("p")
			tat, err := l.client.Get(bg, key).Int64()
			if err != nil {
				t.Fatal(err)
			}
			if err := l.client.Set(bg, key, tat+hour, 2*time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
		}
		d, err := l.Allow(bg, "p", rate, 1)
		if err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > interval {
			t.Fatalf("after the step: %+v %v, want refused for at most one interval (%s)", d, err, interval)
		}
		waitOut(name, clock, d.RetryAfter)
		if d, err := l.Allow(bg, "p", rate, 1); err != nil || !d.Allowed {
			t.Fatalf("one retry-after later: %+v %v", d, err)
		}
	})
}

// TestKeyLimiterHeaders checks Remaining and ResetAfter, the RateLimit-*
// header values, exactly on the local clock and closely on Redis.
func TestKeyLimiterHeaders(t *testing.T) {
	t.Parallel()
	lims, _ := keyLimiters(t)
	rate := Rate{PerSecond: 10, Burst: 3}
	for name, l := range lims {
		t.Run(name, func(t *testing.T) {
			want := []KeyDecision{
				{Allowed: true, Remaining: 2, ResetAfter: 100 * time.Millisecond},
				{Allowed: true, Remaining: 0, ResetAfter: 300 * time.Millisecond},
				{Allowed: false, RetryAfter: 100 * time.Millisecond, Remaining: 0, ResetAfter: 300 * time.Millisecond},
			}
			costs := []int{1, 2, 1}
			for i, w := range want {
				d, err := l.Allow(bg, "p", rate, costs[i])
				if err != nil {
					t.Fatal(err)
				}
				// Redis time moves between calls: allow 50 ms less.
				near := func(got, want time.Duration) bool {
					if name == "local" {
						return got == want
					}
					return got <= want && got > want-50*time.Millisecond
				}
				if d.Allowed != w.Allowed || d.Remaining != w.Remaining || !near(d.RetryAfter, w.RetryAfter) || !near(d.ResetAfter, w.ResetAfter) {
					t.Fatalf("call %d (cost %d): %+v, want %+v", i, costs[i], d, w)
				}
			}
			if _, err := l.Allow(bg, "p", rate, 4); !errors.Is(err, ErrCostExceedsBurst) {
				t.Fatalf("cost 4 over burst 3: %v", err)
			}
		})
	}
}

// TestRedisKeysSharedAcrossReplicas: two replicas (clients) share a key.
func TestRedisKeysSharedAcrossReplicas(t *testing.T) {
	t.Parallel()
	account := redistest.Prefix(t)
	a, err := NewRedisKeys(redistest.Client(t), account)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewRedisKeys(redistest.Client(t), account)
	if err != nil {
		t.Fatal(err)
	}
	rate := Rate{PerSecond: 1, Burst: 2}
	for _, l := range []KeyLimiter{a, b} {
		if d, _ := l.Allow(bg, "p", rate, 1); !d.Allowed {
			t.Fatal("within the burst: denied")
		}
	}
	for _, l := range []KeyLimiter{a, b} {
		if d, _ := l.Allow(bg, "p", rate, 1); d.Allowed {
			t.Fatal("a replica allowed past the shared burst")
		}
	}
}

func TestLocalKeysForgetsIdleKeys(t *testing.T) {
	t.Parallel()
	lims, clock := keyLimiters(t)
	l := lims["local"].(*LocalKeys)
	for i := range 3000 {
		if _, err := l.Allow(bg, "k"+string(rune('a'+i%26))+time.Duration(i).String(), Rate{PerSecond: 1, Burst: 1}, 1); err != nil {
			t.Fatal(err)
		}
		if i == 1500 {
			clock.advance(time.Hour)
		}
	}
	l.mu.Lock()
	n := len(l.tats)
	l.mu.Unlock()
	if n >= 3000 {
		t.Fatalf("%d keys kept, idle keys are never forgotten", n)
	}
}
