package dispatch

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/provider/sim"
	"smsgw/internal/sms"
)

// newSendNow returns a Dispatcher that is never started: SendNow needs no
// loop and queues nothing.
func newSendNow(t *testing.T, acct account, lim limiter.Limiter, p provider.Provider) *Dispatcher {
	t.Helper()
	d, err := New(withRequired(Config{Queue: acct.queue(t, nil), Limiter: lim, Provider: p, Owner: "api",
		Logger: testLogger(), Registerer: prometheus.NewRegistry()}))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func assertNothingQueued(t *testing.T, d *Dispatcher) {
	t.Helper()
	st, err := d.cfg.Queue.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for c, cs := range st {
		if cs.Ready+cs.Scheduled+cs.Leased+cs.Dead != 0 {
			t.Errorf("class %s holds %+v: SendNow must queue nothing", c, cs)
		}
	}
}

func TestSendNowSent(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	s, p, _ := startSim(t, sim.Config{Limit: 100})
	d := newSendNow(t, acct, acct.limiter(t, nil, defaultLimits), p)
	m := newMsg(sms.ClassOTP)
	res, err := d.SendNow(context.Background(), m, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	recs := s.Accepted()
	if len(recs) != 1 || recs[0].Reference != m.ID || recs[0].ID != res.ProviderID {
		t.Errorf("provider accepted %+v, want one send with reference %s and id %s", recs, m.ID, res.ProviderID)
	}
	// An idle limiter grants the slot at once: the delay it granted, not
	// the wall time of the call (which a loaded machine stretches).
	delay := d.m.reserveDelay.WithLabelValues("otp").(prometheus.Histogram)
	if n, sum := histCount(delay), histSum(delay); n != 1 || sum != 0 {
		t.Errorf("reservation delays: %v samples summing to %vs, want one of 0 s from an idle limiter", n, sum)
	}
	t.Logf("waited %s (wall time: reservation round trip, breaker)", res.Waited)
	assertNothingQueued(t, d)
}

// TestSendNowNoSlot: a slot further away than the deadline is refused with
// the exact RetryAfter, and nothing reaches the provider.
func TestSendNowNoSlot(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	s, p, _ := startSim(t, sim.Config{Limit: 100})
	d := newSendNow(t, acct, acct.limiter(t, nil, limiterConfig(1, 1)), p)
	if _, err := d.SendNow(context.Background(), newMsg(sms.ClassOTP), time.Second); err != nil {
		t.Fatal(err)
	}
	_, err := d.SendNow(context.Background(), newMsg(sms.ClassOTP), 100*time.Millisecond)
	var ns NoSlotError
	if !errors.As(err, &ns) || ns.Reason != "rate" {
		t.Fatalf("second SendNow = %v, want NoSlotError{rate}", err)
	}
	if ns.RetryAfter < 700*time.Millisecond || ns.RetryAfter > time.Second {
		t.Errorf("RetryAfter %s, want the ~900 ms until the next slot minus the deadline", ns.RetryAfter)
	}
	if st := s.Stats(); st.Accepted != 1 {
		t.Errorf("provider accepted %d, want 1", st.Accepted)
	}
	assertNothingQueued(t, d)
}

// TestSendNowThrottled: a 429 on the fast path pauses every replica (the
// shared limiter) and answers NoSlotError; the next call is refused without
// reaching the provider.
func TestSendNowThrottled(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	s, p, _ := startSim(t, sim.Config{Limit: 100})
	throttle := sim.Duration(2 * time.Second)
	if err := s.Apply(sim.Control{ThrottleAllFor: &throttle}); err != nil {
		t.Fatal(err)
	}
	lim := acct.limiter(t, nil, defaultLimits)
	d := newSendNow(t, acct, lim, p)
	_, err := d.SendNow(context.Background(), newMsg(sms.ClassOTP), time.Second)
	var ns NoSlotError
	if !errors.As(err, &ns) || ns.Reason != "throttled" || ns.RetryAfter < time.Second {
		t.Fatalf("SendNow = %v, want NoSlotError{throttled} with the provider's Retry-After", err)
	}
	// Another replica (its own Dispatcher, same Redis) is paused too.
	other := newSendNow(t, acct, acct.limiter(t, nil, defaultLimits), p)
	_, err = other.SendNow(context.Background(), newMsg(sms.ClassOTP), time.Second)
	if !errors.As(err, &ns) || ns.Reason != "paused" {
		t.Errorf("other replica's SendNow = %v, want NoSlotError{paused}", err)
	}
	if st := s.Stats(); st.Rejected429 != 1 || st.Accepted != 0 {
		t.Errorf("provider saw %d 429s and %d accepts, want 1 and 0", st.Rejected429, st.Accepted)
	}
	state, err := lim.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if state.PauseRemaining <= 0 {
		t.Errorf("shared limiter not paused after a 429")
	}
}

func TestSendNowErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		p    funcProvider
		want error
	}{
		{"provider timeout is an unknown outcome", func(ctx context.Context, _ *provider.Request) (provider.Result, error) {
			<-ctx.Done() // the deadline is the provider timeout
			return provider.Result{}, &provider.Error{Reason: provider.ReasonTimeout, Temporary: true, Message: ctx.Err().Error()}
		}, ErrOutcomeUnknown},
		{"5xx is an unknown outcome (a proxy's 502 may follow a send)", func(context.Context, *provider.Request) (provider.Result, error) {
			return provider.Result{}, unavailableErr()
		}, ErrOutcomeUnknown},
		{"a connection lost after the request is an unknown outcome", func(context.Context, *provider.Request) (provider.Result, error) {
			return provider.Result{}, &provider.Error{Reason: provider.ReasonNetwork, Temporary: true, Message: "EOF"}
		}, ErrOutcomeUnknown},
		{"a failed dial is unavailable: nothing was sent", func(context.Context, *provider.Request) (provider.Result, error) {
			return provider.Result{}, &provider.Error{Reason: provider.ReasonNetwork, Temporary: true, NotSent: true, Message: "connection refused"}
		}, ErrUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			acct := newAccount(t)
			d := newSendNow(t, acct, acct.limiter(t, nil, defaultLimits), tc.p)
			// The deadline leaves the limiter's Redis call its share (an
			// eighth of what the caller has left) even on a busy machine:
			// a shorter one sends the reservation to the fallback rate.
			const deadline = 800 * time.Millisecond
			start := time.Now()
			_, err := d.SendNow(context.Background(), newMsg(sms.ClassOTP), deadline)
			if !errors.Is(err, tc.want) {
				t.Fatalf("SendNow = %v, want %v", err, tc.want)
			}
			if took := time.Since(start); took > deadline+time.Second {
				t.Errorf("SendNow took %s with a %s deadline", took, deadline)
			}
			assertNothingQueued(t, d)
		})
	}
	t.Run("permanent rejection", func(t *testing.T) {
		t.Parallel()
		acct := newAccount(t)
		d := newSendNow(t, acct, acct.limiter(t, nil, defaultLimits), funcProvider(func(context.Context, *provider.Request) (provider.Result, error) {
			return provider.Result{}, rejectedErr()
		}))
		_, err := d.SendNow(context.Background(), newMsg(sms.ClassOTP), time.Second)
		var ns NoSlotError
		if pe := provider.AsError(err); pe == nil || pe.Reason != provider.ReasonRejected || errors.As(err, &ns) {
			t.Errorf("SendNow = %v, want the provider's rejection", err)
		}
	})
}

// spareRecorder is a limiter that records the Spare of each class's
// reservations, and which of them were Hasty.
type spareRecorder struct {
	limiter.Limiter
	mu    sync.Mutex
	spare map[string][]int
	hasty map[string][]bool
}

func (r *spareRecorder) Reserve(ctx context.Context, req limiter.Request) (limiter.Decision, error) {
	r.mu.Lock()
	r.spare[req.Class] = append(r.spare[req.Class], req.Spare)
	r.hasty[req.Class] = append(r.hasty[req.Class], req.Hasty)
	r.mu.Unlock()
	return r.Limiter.Reserve(ctx, req)
}

func (r *spareRecorder) hastyOf(class string) []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.hasty[class])
}

func (r *spareRecorder) of(class string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spare[class])
}

// TestBulkLeavesASpareUnitForOTP: the send loop's reservations of
// transactional and marketing leave one unit of the global burst free
// (limiter.Request.Spare), so that an OTP arriving after a bulk batch does
// not wait for slots booked ahead; the OTP's own reservations, on the fast
// path and from the queue, keep none, and are the hasty ones
// (limiter.Request.Hasty: they do not wait on a Redis that stopped
// answering).
func TestBulkLeavesASpareUnitForOTP(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	_, p, _ := startSim(t, sim.Config{Limit: 100})
	rec := &spareRecorder{Limiter: acct.limiter(t, nil, defaultLimits), spare: map[string][]int{}, hasty: map[string][]bool{}}
	q := acct.queue(t, nil)
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: rec, Provider: p})
	ms := []*sms.Message{newMsg(sms.ClassMarketing), newMsg(sms.ClassTransactional), newMsg(sms.ClassOTP)}
	enqueue(t, q, ms...)
	d.Notify(sms.ClassOTP)
	waitTerminal(t, q, ms[0].ID, ms[1].ID, ms[2].ID)
	if _, err := d.SendNow(context.Background(), newMsg(sms.ClassOTP), time.Second); err != nil {
		t.Fatal(err)
	}
	for class, want := range map[string]int{"marketing": 1, "transactional": 1, "otp": 0} {
		got := rec.of(class)
		if len(got) == 0 {
			t.Errorf("%s: no reservation", class)
		}
		for _, s := range got {
			if s != want {
				t.Errorf("%s reserved with spare %v, want %d", class, got, want)
				break
			}
		}
	}
	if n := len(rec.of("otp")); n != 2 {
		t.Errorf("%d OTP reservations, want 2 (queued and fast path)", n)
	}
	for class, want := range map[string]bool{"marketing": false, "transactional": false, "otp": true} {
		for _, h := range rec.hastyOf(class) {
			if h != want {
				t.Errorf("%s reserved hasty %v, want %v", class, rec.hastyOf(class), want)
				break
			}
		}
	}
}
