package dispatch

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/provider/sim"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// TestOTPNotStarvedByMarketing: every bulk sender is stuck on a slow
// marketing send, and an OTP enqueued meanwhile still goes at once, on the
// senders reserved for OTP (the starvation of shared worker pools).
func TestOTPNotStarvedByMarketing(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	q := acct.queue(t, nil)
	release := make(chan struct{})
	defer close(release)
	bulkBusy := make(chan struct{}, 16)
	otpSent := make(chan time.Time, 1)
	p := funcProvider(func(ctx context.Context, req *provider.Request) (provider.Result, error) {
		if req.Class == sms.ClassOTP {
			otpSent <- time.Now()
			return provider.Result{ProviderID: "otp"}, nil
		}
		bulkBusy <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return provider.Result{ProviderID: "mkt"}, nil
	})
	enqueueN(t, q, 6, sms.ClassMarketing)
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: p,
		Workers: 2, OTPWorkers: 1, BulkBatch: 1})
	for range 2 {
		<-bulkBusy
	}
	otp := newMsg(sms.ClassOTP)
	enqueue(t, q, otp)
	start := time.Now()
	d.Notify(sms.ClassOTP)
	select {
	case at := <-otpSent:
		if took := at.Sub(start); took > 500*time.Millisecond {
			t.Errorf("OTP sent %s after enqueue while marketing held every bulk sender", took)
		}
	case <-time.After(patience):
		t.Fatal("OTP never sent while marketing held every bulk sender")
	}
}

// TestNotifyWakesLane: with a poll far longer than the test, a message is
// taken only because Notify woke its lane.
func TestNotifyWakesLane(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	q := acct.queue(t, nil)
	rec := newRecorder(funcProvider(func(context.Context, *provider.Request) (provider.Result, error) {
		return provider.Result{ProviderID: "ok"}, nil
	}))
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: rec,
		OTPWorkers: 1, OTPPoll: time.Hour, BulkPoll: time.Hour})
	time.Sleep(100 * time.Millisecond) // both lanes found the queue empty and idle for an hour
	for _, c := range []sms.Class{sms.ClassOTP, sms.ClassMarketing} {
		m := newMsg(c)
		enqueue(t, q, m)
		d.Notify(c)
		select {
		case id := <-rec.call:
			if id != m.ID {
				t.Errorf("sent %s, want %s", id, m.ID)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s message not taken 5 s after Notify", c)
		}
	}
}

// TestRetryNotHeldByThePoll: with a queue that announces ready messages
// (Redis), a lane with nothing to take idles for its poll, a backstop of
// seconds. A message its own send put back with a retry's backoff is not
// announced when it becomes ready; the lane must take it when its backoff
// ends, not when the poll does (here an hour: it would never be retried).
// An audit saw such retries wait the 5 s backstop with Redis, 0.25 s
// embedded. It fails when dueAt does not wake the lane.
func TestRetryNotHeldByThePoll(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	q := acct.queue(t, nil)
	if _, ok := q.(queue.Notifier); !ok {
		t.Fatal("the Redis queue is not a queue.Notifier; this test needs one")
	}
	var (
		calls atomic.Int32
		d     atomic.Pointer[Dispatcher]
	)
	p := funcProvider(func(_ context.Context, req *provider.Request) (provider.Result, error) {
		if calls.Add(1) == 1 {
			// Fail once the lane has found the queue empty and idles.
			for !d.Load().TakesHere(sms.ClassTransactional) {
				time.Sleep(time.Millisecond)
			}
			return provider.Result{}, &provider.Error{Reason: provider.ReasonUnavailable, Temporary: true, Status: 503, Message: "busy"}
		}
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	})
	disp, err := New(withRequired(Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: p, Owner: "t",
		Logger: testLogger(), Registerer: prometheus.NewRegistry(),
		BulkPoll: time.Hour, OTPPoll: time.Hour, BackoffBase: 100 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	d.Store(disp)
	if err := disp.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = disp.Stop(ctx)
	})
	m := newMsg(sms.ClassTransactional)
	enqueue(t, q, m)
	if got := waitTerminal(t, q, m.ID)[m.ID]; got.Status != sms.StatusSent || got.Attempts != 2 {
		t.Fatalf("message %s after %d attempts, want sent on the second", got.Status, got.Attempts)
	}
}

// A marketing message accepted before the recipient's quiet hours began
// (20:59 in Tokyo) and taken after (21:01) waits for their end without
// spending an attempt or calling the provider; one whose TTL ends before
// the morning is expired at once; transactional is never held.
func TestQuietHoursHoldAtTake(t *testing.T) {
	t.Parallel()
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2025, 1, 15, 21, 1, 0, 0, tokyo)
	morning := time.Date(2025, 1, 16, 8, 0, 0, 0, tokyo)
	a := newAccount(t)
	q := a.queue(t, nil)
	var mu sync.Mutex
	var sent []string
	prov := funcProvider(func(ctx context.Context, req *provider.Request) (provider.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, req.ID)
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	})
	held, short, tx := newMsg(sms.ClassMarketing), newMsg(sms.ClassMarketing), newMsg(sms.ClassTransactional)
	short.ExpiresAt = clock.Add(time.Hour) // ends at 22:01, long before 08:00
	enqueue(t, q, held, short, tx)
	policy := sms.QuietPolicy{sms.ClassMarketing: {From: 21 * 60, To: 8 * 60}}
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: a.limiter(t, nil, defaultLimits), Provider: prov,
		Now: func() time.Time { return clock }, Hold: policy.Hold})

	got := waitTerminal(t, q, tx.ID, short.ID)
	if got[tx.ID].Status != sms.StatusSent {
		t.Errorf("transactional: %s, want sent (never held)", got[tx.ID].Status)
	}
	if m := got[short.ID]; m.Status != sms.StatusExpired || m.Attempts != 0 {
		t.Errorf("marketing whose TTL ends at night: %s after %d attempts, want expired without one", m.Status, m.Attempts)
	}
	var m *sms.Message
	waitUntil(t, "the held message put back", func() bool {
		m, err = q.Get(context.Background(), held.ID)
		return err == nil && m.Status == sms.StatusQueued && !m.NotBefore.IsZero()
	})
	// The queue runs on its own clock (Redis); the hold is the time left
	// until 08:00 on the dispatcher's.
	wait := morning.Sub(clock)
	if left := time.Until(m.NotBefore); left < wait-time.Minute || left > wait+time.Minute {
		t.Errorf("held until %s from now, want about %s (08:00 in Tokyo)", left, wait)
	}
	if m.Attempts != 0 || m.LastError != "" {
		t.Errorf("held message: attempts %d, last error %q; want none", m.Attempts, m.LastError)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range sent {
		if id != tx.ID {
			t.Errorf("the provider got %s during quiet hours", id)
		}
	}
	if n := value(d.m.requeues.WithLabelValues("marketing", requeueQuiet)); n != 1 {
		t.Errorf("quiet-hours requeues: %v, want 1", n)
	}
}

// slowAnswers is a limiter whose grants arrive late while stall is set:
// as when this process is starved between asking for a slot and sending.
type slowAnswers struct {
	limiter.Limiter
	stall atomic.Int64 // ns each grant is held back
}

func (s *slowAnswers) Reserve(ctx context.Context, req limiter.Request) (limiter.Decision, error) {
	d, err := s.Limiter.Reserve(ctx, req)
	if n := s.stall.Load(); n > 0 {
		time.Sleep(time.Duration(n))
	}
	return d, err
}

// TestLateSlotForfeited: a grant that arrives later than LateSlot after it
// was asked for is not used (the slot may have been at the ask); the
// message goes back without spending an attempt and is sent once grants
// come in time. The fast path reserves once more, then answers no slot.
func TestLateSlotForfeited(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	s, p, _ := startSim(t, sim.Config{})
	lim := &slowAnswers{Limiter: acct.limiter(t, nil, limiter.Config{Global: limiter.Rate{PerSecond: 1000, Burst: 5}})}
	lim.stall.Store(int64(80 * time.Millisecond))
	q := acct.queue(t, nil)
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: lim, Provider: p, LateSlot: 30 * time.Millisecond})

	_, err := d.SendNow(context.Background(), newMsg(sms.ClassOTP), time.Second)
	var noSlot NoSlotError
	if !errors.As(err, &noSlot) {
		t.Fatalf("fast path with late grants: %v, want NoSlotError", err)
	}

	m := newMsg(sms.ClassTransactional)
	enqueue(t, q, m)
	d.Notify(sms.ClassTransactional)
	late := d.m.lateSlots.WithLabelValues("transactional")
	waitUntil(t, "a queued message's late slot to be forfeited", func() bool { return value(late) >= 3 })
	if v := value(d.m.lateSlots.WithLabelValues("otp")); v != 2 {
		t.Errorf("fast path: %v late slots, want 2 (a second reservation)", v)
	}
	if n := len(s.Accepted()); n != 0 {
		t.Fatalf("the provider got %d sends from late slots", n)
	}
	lim.stall.Store(0)
	got := waitTerminal(t, q, m.ID)[m.ID]
	if got.Status != sms.StatusSent || got.Attempts != 1 {
		t.Errorf("after the stall: status %s, attempts %d; want sent at the first attempt", got.Status, got.Attempts)
	}
	if _, err := d.SendNow(context.Background(), newMsg(sms.ClassOTP), time.Second); err != nil {
		t.Errorf("fast path once grants are in time: %v", err)
	}
}

// TestLateSlotFor: the bound is the contract's margin in time at the
// target rate (100/s contract, 90/s target, burst 5: 5 units, 55.5 ms),
// never below MinLateSlot.
func TestLateSlotFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		contract, target float64
		burst            int
		want             time.Duration
	}{
		{100, 90, 5, 55_555_555},
		{100, 50, 10, 800 * time.Millisecond},
		{100, 95, 5, MinLateSlot},
		{100, 0, 5, MinLateSlot},
	} {
		if got := LateSlotFor(tc.contract, tc.target, tc.burst); got != tc.want {
			t.Errorf("LateSlotFor(%g, %g, %d) = %v, want %v", tc.contract, tc.target, tc.burst, got, tc.want)
		}
	}
}

// burstSwitch is a limiter whose largest grantable cost can be changed,
// as the Redis-down fallback's burst (1 with many replicas) gives way to
// the shared burst when Redis is back. It records the costs it granted.
type burstSwitch struct {
	limiter.Limiter
	max     atomic.Int64
	mu      sync.Mutex
	granted []int
}

func (b *burstSwitch) Reserve(ctx context.Context, req limiter.Request) (limiter.Decision, error) {
	if int64(req.Cost) > b.max.Load() {
		return limiter.Decision{}, limiter.ErrCostExceedsBurst
	}
	d, err := b.Limiter.Reserve(ctx, req)
	if err == nil && d.Allowed {
		b.mu.Lock()
		b.granted = append(b.granted, req.Cost)
		b.mu.Unlock()
	}
	return d, err
}

// largest is the largest cost granted since the last call.
func (b *burstSwitch) largest() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := 0
	for _, c := range b.granted {
		m = max(m, c)
	}
	b.granted = nil
	return m
}

// TestLearnedBatchCapRecovers: batches learned to be too big while the
// limiter's burst was 1 (the fallback's) grow back to BulkBatch once the
// burst is back, instead of staying at one message per reservation for the
// life of the process.
func TestLearnedBatchCapRecovers(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	_, p, _ := startSim(t, sim.Config{})
	lim := &burstSwitch{Limiter: acct.limiter(t, nil, limiter.Config{Global: limiter.Rate{PerSecond: 1000, Burst: 5}})}
	lim.max.Store(1)
	q := acct.queue(t, nil)
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: lim, Provider: p, LearnedCapTTL: 50 * time.Millisecond})
	batch := func() []string {
		ids := enqueueN(t, q, 8, sms.ClassTransactional)
		d.Notify(sms.ClassTransactional)
		return ids
	}
	waitTerminal(t, q, batch()...)
	if c := lim.largest(); c != 1 {
		t.Fatalf("largest cost granted with burst 1: %d", c)
	}
	lim.max.Store(5) // the full burst is back
	waitUntil(t, "a reservation of more than one message again", func() bool {
		waitTerminal(t, q, batch()...)
		return lim.largest() > 1
	})
}

// A learned cap keeps the smaller of two, and is forgotten after its ttl.
func TestLearnedCapsExpire(t *testing.T) {
	t.Parallel()
	var l learnedCaps
	i := classIndex(sms.ClassMarketing)
	l.lower(i, 3, time.Hour)
	l.lower(i, 4, time.Hour)
	if c := l.get(i); c != 3 {
		t.Errorf("cap %d after 3 then 4, want 3", c)
	}
	l.lower(i, 0, time.Hour)
	if c := l.get(i); c != 1 {
		t.Errorf("cap %d after 0, want at least 1", c)
	}
	j := classIndex(sms.ClassTransactional)
	if c := l.get(j); c != 0 {
		t.Errorf("another class has cap %d", c)
	}
	l.lower(j, 2, 0) // a cap learned with no time to live is already gone
	if c := l.get(j); c != 0 {
		t.Errorf("cap %d after its ttl, want 0 (none)", c)
	}
}

// An idle replica takes a message another process enqueued when the queue
// announces it, not at its next poll: with polls of an hour the message
// still goes. (Before the wake-up listener it waited for the poll.)
func TestIdleReplicaWokenByAnotherProcessEnqueue(t *testing.T) {
	acct := newAccount(t)
	sent := make(chan string, 4)
	p := funcProvider(func(_ context.Context, req *provider.Request) (provider.Result, error) {
		sent <- req.ID
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	})
	d, _ := newDispatcher(t, Config{Queue: acct.queue(t, nil), Limiter: acct.limiter(t, nil, defaultLimits), Provider: p,
		OTPWorkers: 1, OTPPoll: time.Hour, BulkPoll: time.Hour})
	other := acct.queue(t, nil) // another process: it never calls d.Notify
	// Both lanes took twice and found nothing: once at start, once on
	// the wake-up every class gets when the listener subscribes. They
	// sleep now until a wake-up (or the hour's poll).
	waitUntil(t, "both lanes idle", func() bool {
		return value(d.m.takes.WithLabelValues(laneOTP, takeEmpty)) >= 2 && value(d.m.takes.WithLabelValues(laneBulk, takeEmpty)) >= 2
	})
	for _, c := range []sms.Class{sms.ClassOTP, sms.ClassMarketing} {
		m := newMsg(c)
		enqueue(t, other, m)
		select {
		case id := <-sent:
			if id != m.ID {
				t.Fatalf("sent %s, want %s", id, m.ID)
			}
		case <-time.After(patience):
			t.Fatalf("%s message enqueued elsewhere not sent within %s: the idle replica was not woken", c, patience)
		}
	}
}

// A message this process hands back because it stops wakes an idle
// replica at once: the other replica, polling only hourly, sends it.
// (Before, it waited for the other's poll.)
func TestStopHandsBackToIdleReplica(t *testing.T) {
	acct := newAccount(t)
	holding := make(chan string, 1)
	stuck := funcProvider(func(ctx context.Context, req *provider.Request) (provider.Result, error) {
		holding <- req.ID
		<-ctx.Done() // the stop cuts this send short
		return provider.Result{}, ctx.Err()
	})
	a, _ := newDispatcher(t, Config{Queue: acct.queue(t, nil), Limiter: acct.limiter(t, nil, defaultLimits), Provider: stuck,
		OTPWorkers: 1, OTPPoll: time.Hour, BulkPoll: time.Hour})
	m := newMsg(sms.ClassTransactional)
	enqueue(t, acct.queue(t, nil), m)
	select {
	case <-holding:
	case <-time.After(patience):
		t.Fatal("the first replica never called the provider")
	}
	sent := make(chan string, 1)
	b, _ := newDispatcher(t, Config{Queue: acct.queue(t, nil), Limiter: acct.limiter(t, nil, defaultLimits),
		Provider: funcProvider(func(_ context.Context, req *provider.Request) (provider.Result, error) {
			sent <- req.ID
			return provider.Result{ProviderID: "p-" + req.ID}, nil
		}),
		OTPWorkers: 1, OTPPoll: time.Hour, BulkPoll: time.Hour})
	waitUntil(t, "the second replica idle", func() bool {
		return value(b.m.takes.WithLabelValues(laneBulk, takeEmpty)) >= 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := a.Stop(ctx); err == nil {
		t.Fatal("Stop did not cut the send short")
	}
	select {
	case id := <-sent:
		if id != m.ID {
			t.Fatalf("sent %s, want %s", id, m.ID)
		}
	case <-time.After(patience):
		t.Fatal("the message handed back at stop was not sent by the idle replica: nobody was woken")
	}
}

// TakesHere: true while a lane serving the class found its queue empty and
// waits (the API then wakes it and no other replica), false once the
// dispatcher stopped.
func TestTakesHere(t *testing.T) {
	acct := newAccount(t)
	d, _ := newDispatcher(t, Config{Queue: acct.queue(t, nil), Limiter: acct.limiter(t, nil, defaultLimits),
		Provider: funcProvider(func(_ context.Context, req *provider.Request) (provider.Result, error) {
			return provider.Result{ProviderID: "p-" + req.ID}, nil
		}),
		OTPWorkers: 1, OTPPoll: time.Hour, BulkPoll: time.Hour})
	waitUntil(t, "both lanes idle", func() bool { return d.TakesHere(sms.ClassOTP) && d.TakesHere(sms.ClassMarketing) })
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range sms.Classes {
		if d.TakesHere(c) {
			t.Errorf("a stopped dispatcher says it takes %s", c)
		}
	}
}

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
