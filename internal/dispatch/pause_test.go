package dispatch

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/provider/sim"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// A provider that refuses the account's credentials must not turn the queue
// into failures: the message goes back without spending an attempt and every
// replica pauses, so nothing is sent (or lost) until the credentials work.
func TestAuthFailurePausesEveryoneAndKeepsTheMessage(t *testing.T) {
	t.Parallel()
	a := newAccount(t)
	q := a.queue(t, nil)
	lim := a.limiter(t, nil, limiterConfig(100, 5))
	var calls atomic.Int64
	prov := funcProvider(func(ctx context.Context, req *provider.Request) (provider.Result, error) {
		calls.Add(1)
		return provider.Result{}, &provider.Error{Reason: provider.ReasonAuth, Status: 401, Message: "bad credentials"}
	})
	m1, m2 := newMsg(sms.ClassTransactional), newMsg(sms.ClassTransactional)
	enqueue(t, q, m1, m2)
	newDispatcher(t, Config{Queue: q, Limiter: lim, Provider: prov, Workers: 2, Lease: 5 * time.Second, MaxAttempts: 3,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})

	waitUntil(t, "the first send", func() bool { return calls.Load() >= 1 })
	time.Sleep(500 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Errorf("provider called %d times after refusing our credentials; want 1 (everyone paused)", n)
	}
	st, err := lim.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.PauseRemaining < AuthPause-5*time.Second {
		t.Errorf("shared pause %s, want about %s", st.PauseRemaining, AuthPause)
	}
	for _, m := range []*sms.Message{m1, m2} {
		got, err := q.Get(context.Background(), m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != sms.StatusQueued || got.Attempts != 0 || got.Dead {
			t.Errorf("message %s: status %s attempts %d dead %v; want queued, 0 attempts spent", m.ID, got.Status, got.Attempts, got.Dead)
		}
	}
}

// TestThrottleAllPausesEveryReplica: the provider answers 429 to everything
// for 3 s in the middle of a campaign. The first 429 pauses every replica
// (shared pause): a replica starts no send once it has seen a 429, so the
// only 429s it gets are for sends already in flight (one, on an idle
// machine; more when a loaded machine stretches sends until they overlap),
// the account is never suspended and every message is still delivered
// exactly once.
func TestThrottleAllPausesEveryReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("7 s campaign")
	}
	t.Parallel()
	const campaign = 250
	acct := newAccount(t)
	s, _, url := startSim(t, sim.Config{Limit: 100})
	producer := acct.queue(t, nil)
	ids := enqueueN(t, producer, campaign, sms.ClassMarketing)
	watches := make([]*throttleWatch, 3)
	reps := startReplicas(t, acct, 3, url, &redistest.RoundTrips{}, func(c *Config) {
		w := &throttleWatch{next: c.Provider}
		for i := range watches {
			if watches[i] == nil {
				watches[i] = w
				break
			}
		}
		c.Provider = w
	})

	waitUntil(t, "50 accepted", func() bool { return s.Stats().Accepted >= 50 })
	throttleFor := sim.Duration(3 * time.Second)
	// The throttle starts somewhere inside Apply: it surely covers
	// [applied, beforeApply+3s], however long Apply took.
	beforeApply := time.Now()
	if err := s.Apply(sim.Control{ThrottleAllFor: &throttleFor}); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()
	waitUntil(t, "the campaign to be accepted", func() bool { return s.Stats().Accepted >= campaign })
	msgs := waitTerminal(t, producer, ids...)

	st := s.Stats()
	t.Logf("sim: accepted=%d 429s=%d 403s=%d duplicates=%d max_in_any_1s=%d", st.Accepted, st.Rejected429, st.Rejected403, st.Duplicates, st.MaxMessagesInAny1s)
	late := 0
	for _, w := range watches {
		late += w.startedAfter429()
	}
	if st.Rejected429 < 1 || late != 0 {
		t.Errorf("provider answered %d 429s, %d of them to sends a replica started after it had seen a 429; want at least one, and none started after", st.Rejected429, late)
	}
	if st.Rejected403 != 0 || st.Suspended {
		t.Errorf("account suspended (403s=%d)", st.Rejected403)
	}
	if st.Accepted != campaign || st.Duplicates != 0 {
		t.Errorf("accepted %d with %d duplicates, want %d exactly once", st.Accepted, st.Duplicates, campaign)
	}
	for i, r := range reps {
		n := value(r.d.m.throttles)
		paused := value(r.d.m.reservations.WithLabelValues("marketing", reservePaused)) + value(r.d.m.requeues.WithLabelValues("marketing", requeuePaused))
		t.Logf("replica %d: 429s=%v paused reservations/requeues=%v", i, n, paused)
		if n == 0 && paused == 0 {
			t.Errorf("replica %d neither saw a 429 nor the shared pause", i)
		}
	}
	for _, rec := range s.Accepted() {
		if rec.At.After(applied) && rec.At.Before(beforeApply.Add(time.Duration(throttleFor))) {
			t.Errorf("message %s accepted %s into the 3 s throttle", rec.Reference, rec.At.Sub(beforeApply))
		}
	}
	for _, id := range ids {
		if m := msgs[id]; m.Status != sms.StatusSent || m.Attempts != 1 {
			t.Errorf("message %s: %s after %d attempts, want sent after 1 (throttles spend none)", id, m.Status, m.Attempts)
		}
	}
}

// throttleWatch wraps a replica's provider and notes, for each 429, whether
// the send had started after the replica had already seen a 429: the pause
// must stop such sends, whatever the timing.
type throttleWatch struct {
	next provider.Provider

	mu   sync.Mutex
	seen int // 429 answers received
	late int // 429 answers to sends started after seen > 0
}

func (w *throttleWatch) Name() string { return w.next.Name() }

func (w *throttleWatch) Send(ctx context.Context, req *provider.Request) (provider.Result, error) {
	w.mu.Lock()
	after := w.seen > 0
	w.mu.Unlock()
	res, err := w.next.Send(ctx, req)
	if pe := provider.AsError(err); pe != nil && pe.Reason == provider.ReasonThrottled {
		w.mu.Lock()
		w.seen++
		if after {
			w.late++
		}
		w.mu.Unlock()
	}
	return res, err
}

func (w *throttleWatch) startedAfter429() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.late
}

// replica is one Dispatcher with its own Redis connection pool and HTTP
// client, as a separate gateway process would have.
type replica struct {
	d      *Dispatcher
	client *redis.Client
}

// startReplicas starts n Dispatchers sharing the account's Redis queue,
// limiter and guard and one provider URL. Every replica's Redis round trips
// go through hook.
func startReplicas(t *testing.T, acct account, n int, url string, hook *redistest.RoundTrips, tune func(*Config)) []replica {
	t.Helper()
	out := make([]replica, n)
	for i := range out {
		c := redis.NewClient(&redis.Options{Addr: acct.client.Options().Addr, PoolSize: 16})
		c.AddHook(hook)
		t.Cleanup(func() { _ = c.Close() })
		guard := acct.guard(t, c, GuardConfig{})
		cfg := Config{
			Queue:    acct.queue(t, c),
			Limiter:  acct.limiter(t, c, defaultLimits),
			Provider: newHTTPProvider(t, url),
			Guard:    guard,
			Owner:    fmt.Sprintf("replica-%d", i),
			// The gateway's defaults.
			Workers:    16,
			OTPWorkers: 4,
		}
		if tune != nil {
			tune(&cfg)
		}
		d, _ := newDispatcher(t, cfg)
		out[i] = replica{d: d, client: c}
	}
	return out
}

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

// TestSenderThrottlePausesOnlyItsSender: a throttle of the sender's scope
// pauses that sender alone, on the shared limiter, for its Retry-After: the
// other sender's messages of the same class go on meanwhile, the throttled
// sender is asked once, the account is not paused and the suspension
// guard's count (the account's 429s) stays at zero. Its messages go once
// the pause ends, none lost.
func TestSenderThrottlePausesOnlyItsSender(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	q := acct.queue(t, nil)
	lim := acct.limiter(t, nil, defaultLimits)
	const pause = 4 * time.Second
	var mu sync.Mutex
	calls := map[string][]time.Time{}
	throttled := false
	p := funcProvider(func(_ context.Context, req *provider.Request) (provider.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		calls[req.From] = append(calls[req.From], time.Now())
		if req.From == "Mkt3" && !throttled {
			throttled = true
			return provider.Result{}, &provider.Error{Reason: provider.ReasonThrottled, Temporary: true, RetryAfter: pause,
				Status: 429, Message: "sender rate limit exceeded", Scope: provider.ScopeSender}
		}
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	})
	var slow, fast []*sms.Message
	var ids []string
	for i := range 25 {
		m := newMsg(sms.ClassTransactional)
		if i < 5 {
			m.From = "Mkt3"
			slow = append(slow, m)
		} else {
			m.From = "Mkt2"
			fast = append(fast, m)
		}
		ids = append(ids, m.ID)
	}
	enqueue(t, q, slow...) // ahead in line
	enqueue(t, q, fast...)
	start := time.Now()
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: lim, Provider: p, Pacing: defaultLimits})
	var fastIDs []string
	for _, m := range fast {
		fastIDs = append(fastIDs, m.ID)
	}
	waitTerminal(t, q, fastIDs...)
	mu.Lock()
	asked := len(calls["Mkt3"])
	mu.Unlock()
	if asked != 1 {
		t.Errorf("the other sender's 20 took %s; Mkt3 asked %d times by then, want them all sent within its %s pause, Mkt3 asked once",
			time.Since(start), asked, pause)
	}
	if left := d.pauseLeft(); left > 0 {
		t.Errorf("the account is paused for %s after a sender's throttle", left)
	}
	if dec, err := lim.Reserve(context.Background(), limiter.Request{Class: "transactional", Cost: 1, Sender: "Mkt3", MaxWait: time.Second}); err != nil || !dec.SenderPaused {
		t.Errorf("the shared limiter on Mkt3 during its pause: %+v %v, want its pause", dec, err)
	}
	for id, m := range waitTerminal(t, q, ids...) {
		if m.Status != sms.StatusSent {
			t.Errorf("%s ended %s", id, m.Status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := len(calls["Mkt3"]); n != len(slow)+1 {
		t.Errorf("Mkt3 asked %d times, want once throttled and once for each of its %d messages", n, len(slow))
	}
	if second := calls["Mkt3"][1]; second.Sub(calls["Mkt3"][0]) < pause-100*time.Millisecond {
		t.Errorf("Mkt3 asked again %s after its throttle, within its %s pause", second.Sub(calls["Mkt3"][0]), pause)
	}
	if got := value(d.m.throttles); got != 0 {
		t.Errorf("the account's throttle count (the suspension guard's) is %v after a sender's 429", got)
	}
	if got := value(d.sm.pauses.WithLabelValues(SenderOther, string(provider.ReasonThrottled))); got != 1 {
		t.Errorf("sender pauses of other senders: %v, want 1", got)
	}
}

// TestSenderLimitDoesNotHoldTheLane: a backlog from a sender at 1/s, ahead
// in line, goes back due at the sender's slots without holding the lane:
// another sender's messages of the same class are all sent before the
// backlog (4 s at least), and the slow sender's sends keep its rate.
func TestSenderLimitDoesNotHoldTheLane(t *testing.T) {
	t.Parallel()
	r := newSlowSenderRig(t)
	q, cfg := r.q, r.cfg
	var slow, other []*sms.Message
	var otherIDs, ids []string
	for range 5 {
		m := newMsg(sms.ClassMarketing)
		m.From = "Slow"
		slow = append(slow, m)
		ids = append(ids, m.ID)
	}
	for range 40 {
		m := newMsg(sms.ClassMarketing)
		m.From = "Other"
		other = append(other, m)
		otherIDs = append(otherIDs, m.ID)
	}
	enqueue(t, q, slow...)
	enqueue(t, q, other...)
	start := time.Now()
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: r.lim, Provider: r.p, Pacing: cfg})
	waitTerminal(t, q, otherIDs...)
	otherDone := time.Since(start)
	slowThen := len(r.sent.of("Slow"))
	waitTerminal(t, q, append(ids, otherIDs...)...)
	if slowThen >= len(slow) {
		t.Errorf("the other sender's 40 took %s and the slow sender had sent %d of %d then: the backlog held the lane",
			otherDone, slowThen, len(slow))
	}
	sent := r.sent.of("Slow")
	for i := 1; i < len(sent); i++ {
		if gap := sent[i].Sub(sent[i-1]); gap < 950*time.Millisecond {
			t.Errorf("slow sender's sends %d and %d %s apart, under its 1 s interval", i-1, i, gap)
		}
	}
	if got := value(d.sm.waits.WithLabelValues("Slow", requeueSenderLimit)); got < 1 {
		t.Errorf("messages put back for the slow sender's limit: %v", got)
	}
}

// TestSenderLimitedOTPWaitsWithinItsDeadline: OTPs that arrive together
// from a sender with a limit of its own are each sent at the sender's
// next slot within their deadline, not refused because the sender's key
// never books ahead.
func TestSenderLimitedOTPWaitsWithinItsDeadline(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	cfg := defaultLimits
	cfg.Senders = map[string]limiter.Rate{"Auth": {PerSecond: 20, Burst: 1}}
	var mu sync.Mutex
	var at []time.Time
	d := newSendNow(t, acct, acct.limiter(t, nil, cfg), funcProvider(func(_ context.Context, req *provider.Request) (provider.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	}))
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for range 5 {
		wg.Go(func() {
			m := newMsg(sms.ClassOTP)
			m.From = "Auth"
			if _, err := d.SendNow(context.Background(), m, time.Second); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("an OTP from a limited sender refused: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	if len(at) == 5 && at[4].Sub(at[0]) < 180*time.Millisecond {
		t.Errorf("5 OTPs from a 20/s sender sent within %s, under 4 intervals", at[4].Sub(at[0]))
	}
}
