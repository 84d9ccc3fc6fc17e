package limiter

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/redistest"
)

// stateCfg has intervals large enough that a loaded machine's few ms between
// seeding and the script never change an answer: global 10/s (100 ms) burst
// 5, marketing 5/s (200 ms) burst 2.
var stateCfg = Config{
	Global:  Rate{PerSecond: 10, Burst: 5},
	Classes: map[string]Rate{"marketing": {PerSecond: 5, Burst: 2}},
}

const ms = int64(1000) // µs

// at is a time in a state table: base+Off, or the script's now+Off.
type at struct {
	Off     int64
	FromNow bool
}

func fromBase(off int64) at { return at{Off: off} }
func fromNow(off int64) at  { return at{Off: off, FromNow: true} }

func (a at) resolve(base, now int64) int64 {
	if a.FromNow {
		return now + a.Off
	}
	return base + a.Off
}

// keyState is a key's value and absolute expiry (ms), as read from Redis.
type keyState struct {
	val      int64
	expireMS int64
}

func readKeys(t *testing.T, c redis.UniversalClient, keys map[string]string) map[string]keyState {
	t.Helper()
	out := make(map[string]keyState)
	for name, k := range keys {
		v, err := c.Get(bg, k).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s holds %q, not integer microseconds", name, v)
		}
		exp, err := c.PExpireTime(bg, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		out[name] = keyState{val: n, expireMS: int64(exp / time.Millisecond)}
	}
	return out
}

// checkExpiry fails when a key could expire before the time it holds (its
// TAT or pause end): the expiry must round up, never down.
func checkExpiry(t *testing.T, states map[string]keyState) {
	t.Helper()
	for name, s := range states {
		if s.expireMS <= 0 {
			t.Errorf("%s has no expiry", name)
		} else if s.expireMS*ms < s.val {
			t.Errorf("%s expires at %d ms, before the %d µs it holds", name, s.expireMS, s.val)
		}
	}
}

// TestReserveScriptStates seeds the keys, reserves once through the wrapper
// and compares the decision and the whole resulting state.
func TestReserveScriptStates(t *testing.T) {
	t.Parallel()
	type want struct {
		allowed, paused bool
		err             error
		// slot: when granted, the reserved send time (now + Delay); when
		// denied, the time the slot would be conforming (now + RetryAfter
		// + MaxWait); when paused, the pause end.
		slot  at
		after map[string]at // keys that change; every other key must not
	}
	tests := []struct {
		name string
		seed map[string]int64 // offsets from base, µs
		req  Request
		want want
	}{
		{"idle keys", nil, Request{Cost: 1},
			want{allowed: true, slot: fromNow(0), after: map[string]at{"global": fromNow(100 * ms)}}},
		{"within the burst", map[string]int64{"global": 300 * ms}, Request{Cost: 1},
			want{allowed: true, slot: fromNow(0), after: map[string]at{"global": fromBase(400 * ms)}}},
		{"stale schedule counts from now", map[string]int64{"global": -3600_000 * ms}, Request{Cost: 1},
			want{allowed: true, slot: fromNow(0), after: map[string]at{"global": fromNow(100 * ms)}}},
		{"global full, no wait accepted", map[string]int64{"global": 800 * ms}, Request{Cost: 1},
			want{slot: fromBase(400 * ms)}},
		{"global full, slot within max_wait", map[string]int64{"global": 800 * ms}, Request{Cost: 1, MaxWait: time.Second},
			want{allowed: true, slot: fromBase(400 * ms), after: map[string]at{"global": fromBase(900 * ms)}}},
		{"class full while global has room", map[string]int64{"global": 100 * ms, "marketing": 600 * ms}, Request{Class: "marketing", Cost: 1},
			want{slot: fromBase(400 * ms)}},
		{"global full while class has room", map[string]int64{"global": 800 * ms, "marketing": -100 * ms}, Request{Class: "marketing", Cost: 1},
			want{slot: fromBase(400 * ms)}},
		{"class sets the delay: global booked at the send time", map[string]int64{"global": 100 * ms, "marketing": 600 * ms},
			Request{Class: "marketing", Cost: 1, MaxWait: time.Second},
			want{allowed: true, slot: fromBase(400 * ms), after: map[string]at{"global": fromBase(500 * ms), "marketing": fromBase(800 * ms)}}},
		{"uncapped class passes the global key only", map[string]int64{"global": 100 * ms, "marketing": 600 * ms}, Request{Class: "otp", Cost: 1},
			want{allowed: true, slot: fromNow(0), after: map[string]at{"global": fromBase(200 * ms)}}},
		{"cost 3 consumes 3 intervals", map[string]int64{"global": 100 * ms}, Request{Cost: 3},
			want{allowed: true, slot: fromNow(0), after: map[string]at{"global": fromBase(400 * ms)}}},
		{"paused", map[string]int64{"pause": 700 * ms, "global": 100 * ms}, Request{Cost: 1, MaxWait: time.Hour},
			want{paused: true, slot: fromBase(700 * ms)}},
		{"pause over", map[string]int64{"pause": -1 * ms}, Request{Cost: 1},
			want{allowed: true, slot: fromNow(0), after: map[string]at{"global": fromNow(100 * ms)}}},
		{"cost above the class burst", map[string]int64{"global": 100 * ms}, Request{Class: "marketing", Cost: 3, MaxWait: time.Hour},
			want{err: ErrCostExceedsBurst}},
		// MaxReserveAhead (10 s) is the furthest a booking goes beyond
		// its burst: the global key's reach is now + 10 s + 500 ms.
		{"max_wait above MaxReserveAhead counts as MaxReserveAhead", map[string]int64{"global": 10_450 * ms}, Request{Cost: 1, MaxWait: time.Hour},
			want{slot: fromBase(10_050 * ms)}},
		{"a booking MaxReserveAhead ahead is kept", map[string]int64{"global": 10_300 * ms}, Request{Cost: 1, MaxWait: MaxReserveAhead},
			want{allowed: true, slot: fromBase(9_900 * ms), after: map[string]at{"global": fromBase(10_400 * ms)}}},
		{"a schedule past the reach (Redis's clock stepped back) is lowered to it, denied or not", map[string]int64{"global": 3_600_000 * ms}, Request{Cost: 1},
			want{slot: fromNow(10_100 * ms), after: map[string]at{"global": fromNow(10_500 * ms)}}},
		{"a class schedule past the reach is lowered, the global one kept", map[string]int64{"global": 100 * ms, "marketing": 3_600_000 * ms},
			Request{Class: "marketing", Cost: 1, MaxWait: time.Second},
			want{slot: fromNow(10_200 * ms), after: map[string]at{"marketing": fromNow(10_400 * ms)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, client, _ := newRedisLimiter(t, stateCfg)
			keys := map[string]string{"global": r.keys.global(), "marketing": r.keys.class("marketing"), "pause": r.keys.pause()}
			base := redisMicros(t, client)
			for name, off := range tc.seed {
				// Seeded keys live an hour, so that an unchanged expiry is
				// visible as unchanged.
				if err := client.Set(bg, keys[name], base+off, time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			}
			before := readKeys(t, client, keys)
			d, now, err := r.reserve(bg, tc.req)
			if !errors.Is(err, tc.want.err) {
				t.Fatalf("err %v, want %v", err, tc.want.err)
			}
			if err == nil {
				if d.Allowed != tc.want.allowed || d.Paused != tc.want.paused || d.Mode != ModeShared {
					t.Fatalf("decision %+v, want allowed=%v paused=%v", d, tc.want.allowed, tc.want.paused)
				}
				slot := tc.want.slot.resolve(base, now)
				var got int64
				switch {
				case d.Allowed:
					got = now + d.Delay.Microseconds()
					if d.RetryAfter != 0 {
						t.Errorf("granted with a retry-after %s", d.RetryAfter)
					}
				case d.Paused:
					got = now + d.RetryAfter.Microseconds()
				default:
					got = now + d.RetryAfter.Microseconds() + min(tc.req.MaxWait, MaxReserveAhead).Microseconds()
				}
				if got != slot {
					t.Errorf("slot at base%+d µs, want base%+d µs (decision %+v)", got-base, slot-base, d)
				}
			}
			after := readKeys(t, client, keys)
			wantState := maps.Clone(before)
			for name, a := range tc.want.after {
				wantState[name] = keyState{val: a.resolve(base, now), expireMS: after[name].expireMS}
			}
			if !maps.Equal(after, wantState) {
				t.Errorf("state after:\n got %v\nwant %v\n(values relative to base %d, now = base%+d)", rel(after, base), rel(wantState, base), base, now-base)
			}
			changed := make(map[string]keyState)
			for name := range tc.want.after {
				changed[name] = after[name]
			}
			checkExpiry(t, changed)
		})
	}
}

func rel(m map[string]keyState, base int64) map[string]string {
	out := make(map[string]string)
	for k, v := range m {
		out[k] = fmt.Sprintf("base%+dµs exp=%dms", v.val-base, v.expireMS)
	}
	return out
}

// eachLimiter runs fn as a parallel subtest for each of limiters(t, cfg),
// named after it.
func eachLimiter(t *testing.T, cfg Config, fn func(t *testing.T, l Limiter)) {
	t.Helper()
	for name, l := range limiters(t, cfg) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, l)
		})
	}
}

// limiters returns a fresh Local, Redis and Shared limiter for cfg: the
// properties below must hold for each.
func limiters(t *testing.T, cfg Config) map[string]Limiter {
	t.Helper()
	m := deciders(t, cfg)
	r, _, _ := newRedisLimiter(t, cfg)
	s, err := NewShared(SharedConfig{Redis: r, MaxSenders: 3})
	if err != nil {
		t.Fatal(err)
	}
	m["shared"] = s
	return m
}

// TestIdleDoesNotBankCredit: however long a key was idle, at most its burst
// passes at once.
func TestIdleDoesNotBankCredit(t *testing.T) {
	t.Parallel()
	r, client, _ := newRedisLimiter(t, Config{Global: Rate{PerSecond: 10, Burst: 3}})
	// An hour-old schedule, as an idle key that has not expired yet.
	if err := client.Set(bg, r.keys.global(), redisMicros(t, client)-3600_000_000, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if allowed, _ := reserveN(t, r, Request{Cost: 1}, 8); allowed != 3 {
		t.Fatalf("after an hour idle %d units passed at once, want the burst 3", allowed)
	}
}

// TestMarketingCapAndOTPHeadroom: the marketing cap holds while the global
// key has room, and OTP still passes while marketing is saturated.
func TestMarketingCapAndOTPHeadroom(t *testing.T) {
	t.Parallel()
	cfg := Config{Global: Rate{PerSecond: 10, Burst: 6}, Classes: map[string]Rate{"marketing": {PerSecond: 2, Burst: 2}}}
	eachLimiter(t, cfg, func(t *testing.T, l Limiter) {
		mkt, denied := reserveN(t, l, Request{Class: "marketing", Cost: 1}, 6)
		if mkt != 2 {
			t.Fatalf("marketing got %d at once, want its cap's burst 2 (the global key had room for 6)", mkt)
		}
		// The class's own interval (500 ms) sets the wait, minus the
		// little time the calls took.
		if denied.RetryAfter <= 300*time.Millisecond || denied.RetryAfter > 500*time.Millisecond {
			t.Fatalf("marketing denied with retry after %s, want about 500ms", denied.RetryAfter)
		}
		if otp, _ := reserveN(t, l, Request{Class: "otp", Cost: 1}, 6); otp != 4 {
			t.Fatalf("OTP got %d while marketing was saturated, want the 4 left of the global burst", otp)
		}
	})
}

// TestSpareKeepsRoomForOTP: a request with Spare 1 (a bulk class) may not
// book the global key so far ahead that the next OTP would wait: it is
// denied with the exact retry-after, writing nothing, and the OTP passes
// at once; a request costing the whole burst still gets it when idle.
func TestSpareKeepsRoomForOTP(t *testing.T) {
	t.Parallel()
	cfg := Config{Global: Rate{PerSecond: 10, Burst: 5}, Classes: map[string]Rate{"marketing": {PerSecond: 5, Burst: 5}}}
	eachLimiter(t, cfg, func(t *testing.T, l Limiter) {
		reserve := func(class string, cost, spare int) Decision {
			t.Helper()
			d, err := l.Reserve(bg, Request{Class: class, Cost: cost, Spare: spare})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		if d := reserve("marketing", 4, 1); !d.Allowed || d.Delay != 0 {
			t.Fatalf("4 marketing units on an idle key with one spare: %+v", d)
		}
		// The global key (100 ms a unit) is 400 ms ahead: one more
		// unit would leave no room for an OTP.
		d := reserve("marketing", 1, 1)
		if d.Allowed || d.RetryAfter <= 50*time.Millisecond || d.RetryAfter > 100*time.Millisecond {
			t.Fatalf("a 5th marketing unit with one spare: %+v, want denied for about 100ms", d)
		}
		time.Sleep(d.RetryAfter)
		if d := reserve("marketing", 1, 1); !d.Allowed {
			t.Fatalf("after its retry-after the same request: %+v, want granted", d)
		}
		if d := reserve("otp", 1, 0); !d.Allowed || d.Delay != 0 {
			t.Fatalf("OTP after marketing took what it may: %+v, want granted at once", d)
		}
	})
	for name, l := range limiters(t, cfg) {
		t.Run(name+"/whole burst", func(t *testing.T) {
			t.Parallel()
			if d, err := l.Reserve(bg, Request{Class: "transactional", Cost: 5, Spare: 1}); err != nil || !d.Allowed {
				t.Fatalf("cost of the whole burst on an idle key with one spare: %+v %v, want granted", d, err)
			}
		})
	}
}

// TestCostConsumesN: a cost of n uses n units of every key it passes.
func TestCostConsumesN(t *testing.T) {
	t.Parallel()
	cfg := Config{Global: Rate{PerSecond: 1, Burst: 5}, Classes: map[string]Rate{"marketing": {PerSecond: 1, Burst: 4}}}
	eachLimiter(t, cfg, func(t *testing.T, l Limiter) {
		if d, err := l.Reserve(bg, Request{Class: "marketing", Cost: 3}); err != nil || !d.Allowed {
			t.Fatalf("cost 3: %+v %v", d, err)
		}
		if d, _ := l.Reserve(bg, Request{Class: "marketing", Cost: 2}); d.Allowed {
			t.Fatal("cost 2 passed a class burst 4 after cost 3")
		}
		if d, _ := l.Reserve(bg, Request{Class: "otp", Cost: 2}); !d.Allowed {
			t.Fatal("cost 2 denied with 2 of the global burst 5 left")
		}
		if d, _ := l.Reserve(bg, Request{Class: "otp", Cost: 1}); d.Allowed {
			t.Fatal("a unit passed after costs 3 + 2 used the global burst 5")
		}
		st, err := l.State(bg)
		if err != nil {
			t.Fatal(err)
		}
		// global: 5 units at 1/s → about 5 s ahead; marketing: 3 s.
		if g := st.Keys[0].Ahead; g < 4500*time.Millisecond || g > 5*time.Second {
			t.Errorf("global %s ahead, want about 5s", g)
		}
		if m := st.Keys[1].Ahead; st.Keys[1].Name != "marketing" || m < 2500*time.Millisecond || m > 3*time.Second {
			t.Errorf("marketing %+v, want about 3s ahead", st.Keys[1])
		}
	})
}

// TestCostExceedsBurst: a cost above a key's burst is an error, never a
// finite wait, and records nothing.
func TestCostExceedsBurst(t *testing.T) {
	t.Parallel()
	cfg := Config{Global: Rate{PerSecond: 10, Burst: 4}, Classes: map[string]Rate{"marketing": {PerSecond: 10, Burst: 2}}}
	eachLimiter(t, cfg, func(t *testing.T, l Limiter) {
		for _, req := range []Request{{Cost: 5, MaxWait: time.Hour}, {Class: "marketing", Cost: 3, MaxWait: time.Hour}} {
			d, err := l.Reserve(bg, req)
			if !errors.Is(err, ErrCostExceedsBurst) {
				t.Fatalf("%+v: got %+v, %v; want ErrCostExceedsBurst", req, d, err)
			}
		}
		st, _ := l.State(bg)
		for _, k := range st.Keys {
			if k.Ahead != 0 {
				t.Errorf("a refused cost moved %s %s ahead", k.Name, k.Ahead)
			}
		}
	})
}

// TestPauseSeenByOtherClientAndNeverShortened: a pause set through one
// connection holds at once for another, and a shorter pause never shortens
// it.
func TestPauseSeenByOtherClientAndNeverShortened(t *testing.T) {
	t.Parallel()
	cfg := Config{Global: Rate{PerSecond: 100, Burst: 5}}
	a, _, account := newRedisLimiter(t, cfg)
	other := redistest.Client(t)
	b, err := NewRedis(other, account, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Pause(bg, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.Pause(bg, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	d, err := b.Reserve(bg, Request{Cost: 1, MaxWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || !d.Paused || d.RetryAfter < 2500*time.Millisecond || d.RetryAfter > 3*time.Second {
		t.Fatalf("other client during a 3s pause: %+v, want paused about 3s", d)
	}
	st, err := b.State(bg)
	if err != nil {
		t.Fatal(err)
	}
	if st.PauseRemaining < 2500*time.Millisecond {
		t.Fatalf("state pause remaining %s, want about 3s", st.PauseRemaining)
	}
	checkExpiry(t, readKeys(t, other, map[string]string{"pause": b.keys.pause()}))
	// A longer pause does extend it.
	if err := b.Pause(bg, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d, _ := a.Reserve(bg, Request{Cost: 1}); d.RetryAfter < 9*time.Second {
		t.Fatalf("after extending to 10s: %+v", d)
	}
	if err := a.Pause(bg, 0); err == nil {
		t.Fatal("a zero pause was accepted")
	}
}

// TestCallerClockIgnored: two replicas whose clocks are 7 minutes apart
// (either way) share one schedule: together they never exceed it, and
// neither is locked out by the other's clock.
func TestCallerClockIgnored(t *testing.T) {
	t.Parallel()
	cfg := Config{Global: Rate{PerSecond: 20, Burst: 2}}
	a, _, account := newRedisLimiter(t, cfg)
	b, err := NewRedis(redistest.Client(t), account, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.clock = func() time.Time { return time.Now().Add(7 * time.Minute) }
	b.clock = func() time.Time { return time.Now().Add(-7 * time.Minute) }
	var mu sync.Mutex
	var sends []int64
	grants := map[*Redis]int{}
	var wg sync.WaitGroup
	deadline := time.Now().Add(1500 * time.Millisecond)
	for _, l := range []*Redis{a, b, a, b} {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				d, now, err := l.reserve(bg, Request{Cost: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					mu.Lock()
					sends = append(sends, now)
					grants[l]++
					mu.Unlock()
					continue
				}
				if d.RetryAfter > 50*time.Millisecond {
					t.Errorf("denied with retry after %s at 20/s: a clock off by minutes locked a replica out", d.RetryAfter)
					return
				}
				time.Sleep(d.RetryAfter)
			}
		})
	}
	wg.Wait()
	if msg := overshoot(sends, 20, 2); msg != "" {
		t.Fatal(msg)
	}
	if grants[a] == 0 || grants[b] == 0 {
		t.Fatalf("grants %v: a replica got nothing", grants)
	}
	if s := a.ClockSkew(); s < 6*time.Minute || s > 8*time.Minute {
		t.Errorf("a's clock skew %s, want about +7m", s)
	}
	if s := b.ClockSkew(); s > -6*time.Minute || s < -8*time.Minute {
		t.Errorf("b's clock skew %s, want about -7m", s)
	}
}

// TestRateRoundingNeverSpeedsUp: 3/s has no whole-µs interval; rounding
// must make it slightly slower, never faster.
func TestRateRoundingNeverSpeedsUp(t *testing.T) {
	t.Parallel()
	cfg := Config{Global: Rate{PerSecond: 3, Burst: 1}}
	r, _, _ := newRedisLimiter(t, cfg)
	l, clock := newFakeLocal(t, cfg)
	var redisSends, localSends []int64
	for range 30 {
		d, now, err := r.reserve(bg, Request{Cost: 1, MaxWait: time.Minute})
		if err != nil || !d.Allowed {
			t.Fatalf("redis: %+v %v", d, err)
		}
		redisSends = append(redisSends, now+d.Delay.Microseconds())
		d, err = l.Reserve(bg, Request{Cost: 1, MaxWait: time.Minute})
		if err != nil || !d.Allowed {
			t.Fatalf("local: %+v %v", d, err)
		}
		localSends = append(localSends, clock.now()+d.Delay.Microseconds())
	}
	if msg := overshoot(redisSends, 3, 1); msg != "" {
		t.Error("redis:", msg)
	}
	if msg := overshoot(localSends, 3, 1); msg != "" {
		t.Error("local:", msg)
	}
}

// TestPrecision: the script works in integer µs at 10,000/s (100 µs apart,
// exactly) and at 1/minute, and every key expires no earlier than the time
// it holds.
func TestPrecision(t *testing.T) {
	t.Parallel()
	t.Run("10000/s", func(t *testing.T) {
		t.Parallel()
		r, client, _ := newRedisLimiter(t, Config{Global: Rate{PerSecond: 10_000, Burst: 1}})
		// Start the schedule 5 s ahead, so that every reservation is a
		// future slot however slow this machine is, and within the 10 s a
		// reservation may wait (MaxReserveAhead caps MaxWait): 10 s ahead
		// was denied by a few µs whenever 200 reservations ran faster than
		// one per 100 µs of Redis time, as they did once in CI.
		if err := client.Set(bg, r.keys.global(), redisMicros(t, client)+5_000_000, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		var prev int64
		for i := range 200 {
			before := redisMicros(t, client)
			d, now, err := r.reserve(bg, Request{Cost: 1, MaxWait: time.Minute})
			if err != nil || !d.Allowed {
				t.Fatalf("reservation %d: %+v %v", i, d, err)
			}
			if after := redisMicros(t, client); now < before || now > after {
				t.Fatalf("the script decided at %d µs, outside the Redis TIME bracket [%d, %d]", now, before, after)
			}
			send := now + d.Delay.Microseconds()
			if i > 0 && send != prev+100 {
				t.Fatalf("reservation %d at +%d µs after the previous, want exactly 100 µs", i, send-prev)
			}
			prev = send
			if i%20 == 0 {
				st := readKeys(t, client, map[string]string{"global": r.keys.global()})
				if st["global"].val != send+100 {
					t.Fatalf("stored TAT %d, want %d", st["global"].val, send+100)
				}
				checkExpiry(t, st)
			}
		}
	})
	t.Run("1/minute", func(t *testing.T) {
		t.Parallel()
		r, client, _ := newRedisLimiter(t, Config{Global: Rate{PerSecond: 1.0 / 60, Burst: 1}})
		d, now1, err := r.reserve(bg, Request{Cost: 1})
		if err != nil || !d.Allowed {
			t.Fatalf("first: %+v %v", d, err)
		}
		st := readKeys(t, client, map[string]string{"global": r.keys.global()})
		if st["global"].val != now1+60_000_000 {
			t.Fatalf("stored TAT now%+d µs, want now+60,000,000", st["global"].val-now1)
		}
		checkExpiry(t, st)
		d, now2, err := r.reserve(bg, Request{Cost: 1})
		if err != nil || d.Allowed {
			t.Fatalf("second: %+v %v", d, err)
		}
		if got, want := d.RetryAfter.Microseconds(), now1+60_000_000-now2; got != want {
			t.Fatalf("retry after %d µs, want exactly %d", got, want)
		}
	})
}

// TestConcurrentReservationsNeverOvershoot: goroutines over several
// connections reserve for 5 s, sleeping their delays as senders do. Every
// grant's send time (Redis time) is recorded; no interval holds more than
// rate·t + burst and marketing keeps its cap. The rate achieved is logged as
// a figure, not asserted: it measures how fast this machine's goroutines
// come back for a slot, which a loaded machine slows.
func TestConcurrentReservationsNeverOvershoot(t *testing.T) {
	t.Parallel()
	const rate, burst, mktRate, mktBurst = 300, 10, 150, 5
	cfg := Config{Global: Rate{PerSecond: rate, Burst: burst}, Classes: map[string]Rate{"marketing": {PerSecond: mktRate, Burst: mktBurst}}}
	_, _, account := newRedisLimiter(t, cfg)
	// Reserving at most (global burst − 2) intervals ahead: a capped class
	// that books global slots ahead then never delays the others (see
	// reserveScript).
	const maxWait = 20 * time.Millisecond
	var mu sync.Mutex
	var all, mkt []int64
	var wg sync.WaitGroup
	stop := time.Now().Add(5 * time.Second)
	for c := range 4 { // 4 clients: several connections
		client := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), PoolSize: 4})
		t.Cleanup(func() { _ = client.Close() })
		l, err := NewRedis(client, account, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for g := range 6 {
			class := "otp"
			if (c+g)%2 == 0 {
				class = "marketing"
			}
			wg.Go(func() {
				for time.Now().Before(stop) {
					d, now, err := l.reserve(bg, Request{Class: class, Cost: 1, MaxWait: maxWait})
					if err != nil {
						t.Error(err)
						return
					}
					if !d.Allowed {
						time.Sleep(d.RetryAfter)
						continue
					}
					send := now + d.Delay.Microseconds()
					mu.Lock()
					all = append(all, send)
					if class == "marketing" {
						mkt = append(mkt, send)
					}
					mu.Unlock()
					time.Sleep(d.Delay)
				}
			})
		}
	}
	wg.Wait()
	if msg := overshoot(all, rate, burst); msg != "" {
		t.Error("global:", msg)
	}
	if msg := overshoot(mkt, mktRate, mktBurst); msg != "" {
		t.Error("marketing:", msg)
	}
	first, last := all[0], all[0]
	for _, s := range all {
		first, last = min(first, s), max(last, s)
	}
	achieved := float64(len(all)-1) / (float64(last-first) / 1e6)
	t.Logf("%d grants over %s: %.1f/s of %d/s (marketing %d)", len(all), micros(last-first), achieved, rate, len(mkt))
	if last-first < 4_500_000 {
		t.Fatalf("grants span only %s", micros(last-first))
	}
}

// The sender level of the limiter tree: a send passes the account's key,
// its class's and its sender's in one step, and a sender's pause stops that
// sender alone. Each case runs on both deciders.

// senderCfg limits Mkt1 to 5/s (burst 1) under an account of 100/s.
var senderCfg = Config{
	Global:  Rate{PerSecond: 100, Burst: 10},
	Classes: map[string]Rate{"marketing": {PerSecond: 50, Burst: 5}},
	Senders: map[string]Rate{"Mkt1": {PerSecond: 5, Burst: 1}},
}

// deciders returns a fresh Local and a fresh Redis limiter of cfg.
func deciders(t *testing.T, cfg Config) map[string]Limiter {
	t.Helper()
	l, err := NewLocal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, _, _ := newRedisLimiter(t, cfg)
	return map[string]Limiter{"local": l, "redis": r}
}

// TestSenderLimitHoldsOnlyItsSender: once Mkt1 has used its burst, its next
// send is denied as the sender's (SenderLimited) with the sender's
// retry-after, and nothing is booked for it: another sender of the same
// class still goes at once, and the account's key keeps its room.
func TestSenderLimitHoldsOnlyItsSender(t *testing.T) {
	t.Parallel()
	for name, l := range deciders(t, senderCfg) {
		t.Run(name, func(t *testing.T) {
			req := Request{Class: "marketing", Cost: 1, Sender: "Mkt1"}
			if d, err := l.Reserve(bg, req); err != nil || !d.Allowed || d.Delay != 0 {
				t.Fatalf("first send from Mkt1: %+v %v", d, err)
			}
			d, err := l.Reserve(bg, req)
			if err != nil || d.Allowed || !d.SenderLimited || d.Paused || d.SenderPaused {
				t.Fatalf("second send from Mkt1 at once: %+v %v, want denied as the sender's", d, err)
			}
			if d.RetryAfter <= 0 || d.RetryAfter > 200*time.Millisecond {
				t.Fatalf("Mkt1's retry-after %s, want up to 200 ms (5/s)", d.RetryAfter)
			}
			// Even within max_wait, the sender's slot is never booked ahead:
			// the account's and the class's keys would be booked at that
			// later time and hold every other sender back.
			if d, err := l.Reserve(bg, Request{Class: "marketing", Cost: 1, Sender: "Mkt1", MaxWait: time.Second}); err != nil || !d.SenderLimited || d.RetryAfter <= 0 {
				t.Fatalf("Mkt1 with max wait 1 s: %+v %v, want denied as the sender's", d, err)
			}
			for i := range 4 { // the class's burst of 5, with Mkt1's one
				if d, err := l.Reserve(bg, Request{Class: "marketing", Cost: 1, Sender: "Mkt2"}); err != nil || !d.Allowed || d.Delay != 0 {
					t.Fatalf("send %d from Mkt2 while Mkt1 waits: %+v %v", i, d, err)
				}
			}
			if d, err := l.Reserve(bg, Request{Class: "otp", Cost: 1, Sender: "Auth"}); err != nil || !d.Allowed || d.Delay != 0 {
				t.Fatalf("OTP while Mkt1 waits: %+v %v", d, err)
			}
		})
	}
}

// TestSenderScheduleNeverOvershoots: a sender's backlog asked for again
// at each retry-after is granted within the sender's rate·t + burst over
// every interval, on Redis time.
func TestSenderScheduleNeverOvershoots(t *testing.T) {
	t.Parallel()
	cfg := Config{Global: Rate{PerSecond: 1000, Burst: 20}, Senders: map[string]Rate{"S": {PerSecond: 40, Burst: 2}}}
	r, _, _ := newRedisLimiter(t, cfg)
	var sends []int64
	for len(sends) < 30 {
		d, now, err := r.reserve(bg, Request{Class: "transactional", Cost: 1, Sender: "S", MaxWait: time.Second})
		switch {
		case err != nil:
			t.Fatal(err)
		case d.Allowed:
			sends = append(sends, now+d.Delay.Microseconds())
		case !d.SenderLimited || d.RetryAfter > 25*time.Millisecond:
			t.Fatalf("denied %+v, want the sender's retry-after of at most one interval", d)
		default:
			time.Sleep(d.RetryAfter)
		}
	}
	if msg := overshoot(sends, 40, 2); msg != "" {
		t.Fatalf("the sender's schedule overshoots: %s", msg)
	}
}

// TestSenderCostAboveItsBurst: a message of more units than the sender's
// burst is never refused for it; it goes alone at once and books all its
// units, so that the sender's next message waits for them.
func TestSenderCostAboveItsBurst(t *testing.T) {
	t.Parallel()
	for name, l := range deciders(t, senderCfg) {
		t.Run(name, func(t *testing.T) {
			if d, err := l.Reserve(bg, Request{Class: "transactional", Cost: 3, Sender: "Mkt1"}); err != nil || !d.Allowed || d.Delay != 0 {
				t.Fatalf("3 units from a sender of burst 1: %+v %v", d, err)
			}
			d, err := l.Reserve(bg, Request{Class: "transactional", Cost: 1, Sender: "Mkt1"})
			if err != nil || !d.SenderLimited || d.RetryAfter <= 200*time.Millisecond || d.RetryAfter > 600*time.Millisecond {
				t.Fatalf("the next unit: %+v %v, want the sender's retry-after of 3 intervals (600 ms), more than one's", d, err)
			}
		})
	}
}

// TestSenderPauseHoldsOnlyItsSender: a sender's pause set by one replica
// holds on the others, is never shortened and stops no other sender; the
// account's pause still holds for every sender, before the sender's.
func TestSenderPauseHoldsOnlyItsSender(t *testing.T) {
	t.Parallel()
	local, err := NewLocal(senderCfg)
	if err != nil {
		t.Fatal(err)
	}
	a, _, account := newRedisLimiter(t, senderCfg)
	b, err := NewRedis(redistest.Client(t), account, senderCfg)
	if err != nil {
		t.Fatal(err)
	}
	for name, pair := range map[string][2]Limiter{"local": {local, local}, "redis": {a, b}} {
		t.Run(name, func(t *testing.T) {
			setter, other := pair[0], pair[1]
			for _, sender := range []string{"Mkt1", "+15550100"} { // limited, and not
				inForce, err := setter.PauseSender(bg, sender, 3*time.Second)
				if err != nil || inForce < 2900*time.Millisecond {
					t.Fatalf("pause %s: %s %v", sender, inForce, err)
				}
				if inForce, err := other.PauseSender(bg, sender, 100*time.Millisecond); err != nil || inForce < 2*time.Second {
					t.Fatalf("a shorter pause of %s: in force %s %v, want the longer one kept", sender, inForce, err)
				}
				d, err := other.Reserve(bg, Request{Class: "marketing", Cost: 1, Sender: sender, MaxWait: time.Hour})
				if err != nil || d.Allowed || !d.SenderPaused || d.Paused || d.RetryAfter < 2*time.Second {
					t.Fatalf("%s while paused: %+v %v", sender, d, err)
				}
			}
			if d, err := other.Reserve(bg, Request{Class: "marketing", Cost: 1, Sender: "Mkt2"}); err != nil || !d.Allowed {
				t.Fatalf("another sender during the pause: %+v %v", d, err)
			}
			if d, err := other.Reserve(bg, Request{Class: "otp", Cost: 1}); err != nil || !d.Allowed {
				t.Fatalf("the default sender during the pause: %+v %v", d, err)
			}
			if err := setter.Pause(bg, time.Second); err != nil {
				t.Fatal(err)
			}
			if d, err := other.Reserve(bg, Request{Class: "marketing", Cost: 1, Sender: "Mkt1"}); err != nil || !d.Paused || d.SenderPaused {
				t.Fatalf("a paused sender while the account is paused: %+v %v, want the account's pause", d, err)
			}
		})
	}
}

// TestSenderKeysShareTheTagAndHideTheSender: a sender's keys are under the
// account's hash tag (one slot with the rest of a reservation) and never
// show the sender, which may be a phone number.
func TestSenderKeysShareTheTagAndHideTheSender(t *testing.T) {
	t.Parallel()
	k, err := newKeySet("acct")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{k.sender("+15550100"), k.senderPause("+15550100")} {
		if !strings.HasPrefix(key, "{smsgw:acct}:limiter:sender:") || strings.Contains(key, "5550100") {
			t.Errorf("sender key %q: want the account's tag and no number", key)
		}
	}
	if k.sender("a") == k.sender("b") || k.senderPause("a") == k.sender("a") {
		t.Error("two senders, or a sender's pause and its schedule, share a key")
	}
}

// TestSenderFallbackDividesAndKeepsPauses: with Redis down, each process
// takes its share of a sender's limit as of the account's, and a sender's
// pause seen on Redis keeps holding.
func TestSenderFallbackDividesAndKeepsPauses(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	cfg := Config{Global: Rate{PerSecond: 100, Burst: 10}, Senders: map[string]Rate{"Mkt1": {PerSecond: 10, Burst: 4}}}
	account := redistest.Prefix(t)
	a := newShared(t, srv, account, cfg, 2).shared
	b := newShared(t, srv, account, cfg, 2).shared
	if _, err := a.PauseSender(bg, "Mkt2", 4*time.Second); err != nil {
		t.Fatal(err)
	}
	if d, err := b.Reserve(bg, Request{Cost: 1, Sender: "Mkt2"}); err != nil || !d.SenderPaused || d.Mode != ModeShared {
		t.Fatalf("b while a paused Mkt2: %+v %v", d, err)
	}
	srv.Kill()
	if d, err := b.Reserve(bg, Request{Cost: 1, Sender: "Mkt2", MaxWait: time.Hour}); err != nil || !d.SenderPaused || d.RetryAfter < 2*time.Second {
		t.Fatalf("b with Redis down during Mkt2's pause: %+v %v", d, err)
	}
	// Fallback: Mkt1 at 5/s, burst 2 in each of the 2 processes, its
	// burst already spent when the fallback took over (Local.spend).
	allowed, denied := reserveN(t, a, Request{Cost: 1, Sender: "Mkt1"}, 3)
	if allowed != 0 || !denied.SenderLimited || denied.Mode != ModeFallback {
		t.Fatalf("fallback right after Redis died: %d allowed, last denial %+v", allowed, denied)
	}
	if denied.RetryAfter <= 0 || denied.RetryAfter > 200*time.Millisecond {
		t.Fatalf("fallback retry-after %s, want up to 200 ms (one unit at 5/s)", denied.RetryAfter)
	}
	time.Sleep(denied.RetryAfter)
	if d, err := a.Reserve(bg, Request{Cost: 1, Sender: "Mkt1", MaxWait: time.Second}); err != nil || !d.Allowed {
		t.Fatalf("fallback Mkt1 at its retry-after: %+v %v", d, err)
	}
	if d, err := a.Reserve(bg, Request{Cost: 1, Sender: "Mkt1"}); err != nil || !d.SenderLimited || d.RetryAfter < 150*time.Millisecond {
		t.Fatalf("fallback Mkt1 right after a send: %+v %v, want about 200 ms (5/s, not the shared 10/s)", d, err)
	}
	if d, err := a.Reserve(bg, Request{Cost: 1, Sender: "Mkt2"}); err != nil || !d.SenderPaused || d.Mode != ModeFallback {
		t.Fatalf("a, which paused Mkt2, with Redis down: %+v %v", d, err)
	}
	if d, err := a.Reserve(bg, Request{Cost: 1, Sender: "Mkt3", MaxWait: time.Second}); err != nil || !d.Allowed || d.Mode != ModeFallback {
		t.Fatalf("another sender in fallback: %+v %v", d, err)
	}
	// A sender's pause set while Redis is down holds in this process.
	if inForce, err := a.PauseSender(bg, "Mkt4", 3*time.Second); err != nil || inForce < 2*time.Second {
		t.Fatalf("pause Mkt4 with Redis down: %s %v", inForce, err)
	}
	if d, err := a.Reserve(bg, Request{Cost: 1, Sender: "Mkt4", MaxWait: time.Second}); err != nil || !d.SenderPaused {
		t.Fatalf("Mkt4, paused with Redis down: %+v %v", d, err)
	}
	// Redis back without the pause keys (no persistence): the pauses this
	// process saw still hold until they end.
	srv.Start()
	deadline := time.Now().Add(2500 * time.Millisecond)
	for b.Mode() != ModeShared {
		if time.Now().After(deadline) {
			t.Fatal("b not shared again")
		}
		b.Probe(bg)
		time.Sleep(20 * time.Millisecond)
	}
	if d, err := b.Reserve(bg, Request{Cost: 1, Sender: "Mkt2"}); err != nil || !d.SenderPaused || d.Mode != ModeShared {
		t.Fatalf("b on Redis back without Mkt2's pause key: %+v %v", d, err)
	}
}
