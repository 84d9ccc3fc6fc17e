package limiter

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a monotonic clock in µs that tests move by hand.
type fakeClock struct{ us atomic.Int64 }

func (c *fakeClock) now() int64              { return c.us.Load() }
func (c *fakeClock) advance(d time.Duration) { c.us.Add(int64(d / time.Microsecond)) }

func newFakeLocal(t *testing.T, cfg Config) (*Local, *fakeClock) {
	t.Helper()
	c := &fakeClock{}
	c.us.Store(1_000_000_000) // an arbitrary origin: nothing may assume 0
	l, err := newLocal(cfg, c.now)
	if err != nil {
		t.Fatal(err)
	}
	return l, c
}

func TestLocalIdleDoesNotBankCredit(t *testing.T) {
	t.Parallel()
	l, clock := newFakeLocal(t, Config{Global: Rate{PerSecond: 10, Burst: 3}})
	clock.advance(time.Hour)
	allowed, last := reserveN(t, l, Request{Cost: 1}, 10)
	if allowed != 3 {
		t.Fatalf("after an hour idle %d units passed at once, want the burst 3", allowed)
	}
	if last.RetryAfter != 100*time.Millisecond {
		t.Fatalf("retry after %s, want one interval 100ms", last.RetryAfter)
	}
}

func TestLocalPause(t *testing.T) {
	t.Parallel()
	l, clock := newFakeLocal(t, Config{Global: Rate{PerSecond: 10, Burst: 3}})
	if err := l.Pause(bg, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Pause(bg, time.Second); err != nil { // must not shorten
		t.Fatal(err)
	}
	d, err := l.Reserve(bg, Request{Cost: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || !d.Paused || d.RetryAfter != 2*time.Second {
		t.Fatalf("during a 2s pause got %+v, want paused for 2s", d)
	}
	clock.advance(2 * time.Second)
	if d, _ := l.Reserve(bg, Request{Cost: 1}); !d.Allowed {
		t.Fatalf("after the pause got %+v, want allowed", d)
	}
	st, _ := l.State(bg)
	if st.PauseRemaining != 0 || st.Mode != ModeLocal {
		t.Fatalf("state %+v", st)
	}
}

// TestLocalReservations checks the reserved delays of one key exactly: the
// burst at once, then one interval apart, and a denial with the exact wait.
func TestLocalReservations(t *testing.T) {
	t.Parallel()
	l, _ := newFakeLocal(t, Config{Global: Rate{PerSecond: 10_000, Burst: 2}})
	want := []time.Duration{0, 0, 100 * time.Microsecond, 200 * time.Microsecond, 300 * time.Microsecond}
	for i, w := range want {
		d, err := l.Reserve(bg, Request{Cost: 1, MaxWait: 300 * time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || d.Delay != w {
			t.Fatalf("reservation %d: %+v, want delay %s", i, d, w)
		}
	}
	d, _ := l.Reserve(bg, Request{Cost: 1, MaxWait: 300 * time.Microsecond})
	if d.Allowed || d.RetryAfter != 100*time.Microsecond {
		t.Fatalf("past max_wait: %+v, want denied with retry after 100µs", d)
	}
	st, _ := l.State(bg)
	if st.Keys[0].Ahead != 500*time.Microsecond {
		t.Fatalf("state %+v, want the global schedule 500µs ahead", st)
	}
}

// TestLocalPrecisionOnePerMinute: 1/minute keeps its full minute.
func TestLocalPrecisionOnePerMinute(t *testing.T) {
	t.Parallel()
	l, clock := newFakeLocal(t, Config{Global: Rate{PerSecond: 1.0 / 60, Burst: 1}})
	if d, _ := l.Reserve(bg, Request{Cost: 1}); !d.Allowed {
		t.Fatal("first unit denied")
	}
	clock.advance(59*time.Second + 999_999*time.Microsecond)
	d, _ := l.Reserve(bg, Request{Cost: 1})
	if d.Allowed || d.RetryAfter != time.Microsecond {
		t.Fatalf("1µs before the minute: %+v, want denied, retry after 1µs", d)
	}
	clock.advance(time.Microsecond)
	if d, _ := l.Reserve(bg, Request{Cost: 1}); !d.Allowed {
		t.Fatalf("at the minute: %+v, want allowed", d)
	}
}

// TestLocalConcurrent: many goroutines on one frozen clock get distinct
// conforming slots (run with -race).
func TestLocalConcurrent(t *testing.T) {
	t.Parallel()
	l, clock := newFakeLocal(t, Config{Global: Rate{PerSecond: 1000, Burst: 5}})
	var mu sync.Mutex
	var sends []int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 50 {
				d, err := l.Reserve(bg, Request{Cost: 1, MaxWait: time.Hour})
				if err != nil || !d.Allowed {
					t.Errorf("reserve: %+v %v", d, err)
					return
				}
				mu.Lock()
				sends = append(sends, clock.now()+ceilMicros(d.Delay))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(sends) != 800 {
		t.Fatalf("%d grants, want 800", len(sends))
	}
	if msg := overshoot(sends, 1000, 5); msg != "" {
		t.Fatal(msg)
	}
}

func TestLocalCostExceedsBurst(t *testing.T) {
	t.Parallel()
	l, _ := newFakeLocal(t, Config{Global: Rate{PerSecond: 10, Burst: 5}, Classes: map[string]Rate{"marketing": {PerSecond: 5, Burst: 2}}})
	if _, err := l.Reserve(bg, Request{Class: "marketing", Cost: 3, MaxWait: time.Hour}); !errors.Is(err, ErrCostExceedsBurst) {
		t.Fatalf("cost 3 over a class burst 2: err %v, want ErrCostExceedsBurst", err)
	}
	if d, err := l.Reserve(bg, Request{Class: "otp", Cost: 5}); err != nil || !d.Allowed {
		t.Fatalf("cost 5 = global burst for an uncapped class: %+v %v", d, err)
	}
}

// TestLocalClockStepBack: the twin of the script's reach (MaxReserveAhead),
// on a clock that steps back an hour, as Redis's does when its host's time
// steps or a failover promotes a replica whose clock is behind. Units booked
// on the old clock are still owed to the provider, which counts real time;
// sending must resume within about MaxReserveAhead, not an hour, and the
// sends before and after the step together must conform in real time.
// (Local itself reads a monotonic clock and never sees a step: this fake
// clock is the only way to drive step's lowering through a whole history.)
func TestLocalClockStepBack(t *testing.T) {
	t.Parallel()
	const rate, burst = 100, 5
	l, clock := newFakeLocal(t, Config{Global: Rate{PerSecond: rate, Burst: burst}})
	clock.advance(24 * time.Hour) // so that the step back stays after the origin, where an unset pause ends
	otp := Request{Class: "otp", Cost: 1, MaxWait: time.Second}
	// Sends are in the provider's time: the clock until the step, the clock
	// plus the step after it. First the schedule is booked as far as it
	// goes, MaxReserveAhead ahead, and no more (a booking at the reach is
	// never lowered without a step); 100 ms later an OTP finds nothing free
	// within its second.
	var sends []int64
	reserve := func(req Request) bool {
		t.Helper()
		d, err := l.Reserve(bg, req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			sends = append(sends, clock.now()+d.Delay.Microseconds())
		}
		return d.Allowed
	}
	want := int(MaxReserveAhead.Seconds())*rate + burst
	for n := 0; n <= want && reserve(Request{Cost: 1, MaxWait: MaxReserveAhead}); n++ {
	}
	if len(sends) != want {
		t.Fatalf("booked %d units MaxReserveAhead ahead, want %d", len(sends), want)
	}
	clock.advance(100 * time.Millisecond)
	for n := 0; n <= rate && reserve(otp); n++ {
	}
	if msg := overshoot(sends, rate, burst); msg != "" {
		t.Fatalf("before the step: %s", msg)
	}
	stepAt := clock.now()
	const back = time.Hour
	clock.advance(-back)
	offset := back.Microseconds()
	first := int64(-1)
	for n := 0; n < 2*rate; {
		d, err := l.Reserve(bg, otp)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			clock.advance(10 * time.Millisecond)
			if clock.now()+offset-stepAt > int64(back/time.Microsecond) {
				t.Fatalf("nothing granted in the %s after the clock stepped back %s", back, back)
			}
			continue
		}
		send := clock.now() + offset + d.Delay.Microseconds()
		if first < 0 {
			first = send
		}
		sends = append(sends, send)
		n++
	}
	resumed := micros(first - stepAt)
	t.Logf("%d units booked before the step; the first send after it %s later", len(sends)-2*rate, resumed)
	if resumed > MaxReserveAhead+time.Second {
		t.Errorf("the first send after the step went %s after it, want within about MaxReserveAhead (%s)", resumed, MaxReserveAhead)
	}
	if msg := overshoot(sends, rate, burst); msg != "" {
		t.Errorf("in real time across the step: %s", msg)
	}
}
