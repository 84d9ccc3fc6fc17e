package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/provider/sim"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// hangingProvider signals each call on called and blocks until ctx ends or
// release is closed; then it accepts.
type hangingProvider struct {
	called  chan string
	release chan struct{}
}

func newHangingProvider() *hangingProvider {
	return &hangingProvider{called: make(chan string, 64), release: make(chan struct{})}
}

func (h *hangingProvider) Name() string { return "hanging" }
func (h *hangingProvider) Send(ctx context.Context, req *provider.Request) (provider.Result, error) {
	h.called <- req.ID
	select {
	case <-ctx.Done():
		return provider.Result{}, &provider.Error{Reason: provider.ReasonTimeout, Temporary: true, Message: ctx.Err().Error()}
	case <-h.release:
		return provider.Result{ProviderID: "hang-" + req.ID}, nil
	}
}

func (h *hangingProvider) waitCalls(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	timeout := time.After(patience)
	for len(ids) < n {
		select {
		case id := <-h.called:
			ids = append(ids, id)
		case <-timeout:
			t.Fatalf("provider called %d times, want %d", len(ids), n)
		}
	}
	return ids
}

// TestCrashedReplicaMessagesRecovered: replica A dies mid-send (its context
// is cancelled: heartbeats stop, nothing is acknowledged or put back).
// Replica B's recoverer hands A's messages on once their lease expires, and
// the provider receives every message exactly once.
func TestCrashedReplicaMessagesRecovered(t *testing.T) {
	t.Parallel()
	const n, lease = 6, time.Second
	acct := newAccount(t)
	q := acct.queue(t, nil)
	ids := enqueueN(t, q, n, sms.ClassTransactional)

	hang := newHangingProvider()
	a, err := New(withRequired(Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: hang, Owner: "a",
		Workers: 2, Lease: lease, Logger: testLogger(), Registerer: prometheus.NewRegistry()}))
	if err != nil {
		t.Fatal(err)
	}
	crash, kill := context.WithCancel(context.Background())
	if err := a.Start(crash); err != nil {
		t.Fatal(err)
	}
	held := hang.waitCalls(t, 2) // both of A's senders are mid-send
	kill()
	killedAt := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.Stop(ctx) // returns once A's goroutines are gone; it acknowledges nothing

	for _, id := range held {
		m, err := q.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if m.Status != sms.StatusSending {
			t.Fatalf("message %s held by the crashed replica is %s, want still sending (lease not released)", id, m.Status)
		}
	}

	s, p, _ := startSim(t, sim.Config{Limit: 100})
	newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: p, Owner: "b",
		Lease: lease, RecoverEvery: 100 * time.Millisecond})
	msgs := waitTerminal(t, q, ids...)

	st := s.Stats()
	if st.Accepted != n || st.Duplicates != 0 {
		t.Errorf("provider accepted %d with %d duplicates, want %d exactly once", st.Accepted, st.Duplicates, n)
	}
	for _, id := range ids {
		if msgs[id].Status != sms.StatusSent {
			t.Errorf("message %s is %s, want sent", id, msgs[id].Status)
		}
	}
	for _, rec := range s.Accepted() {
		if slices.Contains(held, rec.Reference) && rec.At.Sub(killedAt) < lease-100*time.Millisecond {
			t.Errorf("message %s held by the crashed replica was sent %s after the crash, before its %s lease expired", rec.Reference, rec.At.Sub(killedAt), lease)
		}
	}
}

// oneQueued is a fresh account whose queue holds one transactional message.
func oneQueued(t *testing.T) (account, queue.Queue, *sms.Message) {
	t.Helper()
	acct := newAccount(t)
	q := acct.queue(t, nil)
	m := newMsg(sms.ClassTransactional)
	enqueue(t, q, m)
	return acct, q, m
}

// TestHeartbeatKeepsLease: a send slower than the lease keeps its lease
// because the heartbeat extends it, so another replica's recoverer never
// hands the message on and the provider receives it once.
func TestHeartbeatKeepsLease(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	acct, q, m := oneQueued(t)

	hang := newHangingProvider()
	newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: hang, Owner: "slow",
		Workers: 1, Lease: lease, RecoverEvery: time.Hour})
	hang.waitCalls(t, 1)

	other := newRecorder(funcProvider(func(context.Context, *provider.Request) (provider.Result, error) {
		return provider.Result{ProviderID: "other"}, nil
	}))
	newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: other, Owner: "other",
		Lease: lease, RecoverEvery: 50 * time.Millisecond})
	time.Sleep(3 * lease) // the slow send outlives its lease three times over
	close(hang.release)
	got := waitTerminal(t, q, m.ID)[m.ID]
	if got.Status != sms.StatusSent || got.ProviderID != "hang-"+m.ID {
		t.Errorf("message %s (%s), want sent by the slow replica", got.Status, got.ProviderID)
	}
	if calls := other.calls(); len(calls) != 0 {
		t.Errorf("the other replica sent %v: the lease was handed on despite the heartbeat", calls)
	}
}

// TestStop covers graceful stop: sends in progress finish within the bound;
// past the bound they are cut short and their messages put back without
// spending an attempt; nothing is taken after Stop.
func TestStop(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		bound    time.Duration
		release  bool // let the in-flight sends finish
		want     sms.Status
		wantErr  bool
		attempts int
	}{
		{name: "in-flight sends finish", bound: 10 * time.Second, release: true, want: sms.StatusSent, attempts: 1},
		{name: "past the bound leases are released", bound: 200 * time.Millisecond, want: sms.StatusQueued, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			acct := newAccount(t)
			q := acct.queue(t, nil)
			enqueueN(t, q, 5, sms.ClassTransactional)
			hang := newHangingProvider()
			d, err := New(withRequired(Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: hang, Owner: "stop",
				Workers: 2, OTPWorkers: 1, Logger: testLogger(), Registerer: prometheus.NewRegistry()}))
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			inFlight := hang.waitCalls(t, 2)

			ctx, cancel := context.WithTimeout(context.Background(), tc.bound)
			defer cancel()
			var (
				stopErr error
				wg      sync.WaitGroup
			)
			wg.Go(func() { stopErr = d.Stop(ctx) })
			if tc.release {
				waitUntil(t, "the pacers to stop", func() bool { return d.takeCtx.Err() != nil })
				close(hang.release)
			}
			wg.Wait()
			if (stopErr != nil) != tc.wantErr {
				t.Fatalf("Stop = %v, want error %v", stopErr, tc.wantErr)
			}
			if extra := len(hang.called); extra != 0 {
				t.Errorf("%d more sends after Stop began", extra)
			}
			for _, id := range inFlight {
				m, err := q.Get(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				if m.Status != tc.want || m.Attempts != tc.attempts {
					t.Errorf("in-flight message %s: %s with %d attempts, want %s with %d", id, m.Status, m.Attempts, tc.want, tc.attempts)
				}
			}
			st, err := q.Stats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if l := st[sms.ClassTransactional].Leased; l != 0 {
				t.Errorf("%d leases still held after Stop", l)
			}
			if v := value(d.m.inFlight); v != 0 {
				t.Errorf("in-flight gauge %v after Stop, want 0", v)
			}
		})
	}
}

// TestStopReleasesHeldMessage: a message the pacer holds while it waits for
// a limiter slot goes back to the queue at once on Stop, unspent.
func TestStopReleasesHeldMessage(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	q := acct.queue(t, nil)
	a, b := newMsg(sms.ClassTransactional), newMsg(sms.ClassTransactional)
	enqueue(t, q, a, b)
	rec := newRecorder(funcProvider(func(context.Context, *provider.Request) (provider.Result, error) {
		return provider.Result{ProviderID: "ok"}, nil
	}))
	// One per 2 s: the second message waits ~2 s for its slot, within HoldMax.
	lim := acct.limiter(t, nil, limiterConfig(0.5, 1))
	d, err := New(withRequired(Config{Queue: q, Limiter: lim, Provider: rec, Owner: "hold", HoldMax: 5 * time.Second,
		Logger: testLogger(), Registerer: prometheus.NewRegistry()}))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first send and the second reservation denied", func() bool {
		return len(rec.calls()) == 1 && value(d.m.reservations.WithLabelValues("transactional", reserveDenied)) >= 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Stop took %s: it waited for the slot instead of releasing the message", took)
	}
	held := b.ID
	if rec.calls()[0] == b.ID {
		held = a.ID
	}
	m, err := q.Get(context.Background(), held)
	if err != nil {
		t.Fatal(err)
	}
	if m.Status != sms.StatusQueued || m.Attempts != 0 {
		t.Errorf("held message: %s with %d attempts, want queued with 0", m.Status, m.Attempts)
	}
}

// cutOffQueue is a replica's view of a shared queue when the network cuts
// this replica off from Redis while the others still reach it: once cut,
// every call fails as a dropped connection would.
type cutOffQueue struct {
	queue.Queue
	cut atomic.Bool
}

var errCutOff = errors.New("dial tcp 10.0.0.7:6379: i/o timeout")

func (c *cutOffQueue) Take(ctx context.Context, o queue.TakeOptions) (*queue.Leased, time.Duration, error) {
	if c.cut.Load() {
		return nil, 0, errCutOff
	}
	return c.Queue.Take(ctx, o)
}

func (c *cutOffQueue) TakeMore(ctx context.Context, o queue.TakeOptions, most, units int) ([]*queue.Leased, error) {
	if c.cut.Load() {
		return nil, errCutOff
	}
	return c.Queue.TakeMore(ctx, o, most, units)
}

func (c *cutOffQueue) Extend(ctx context.Context, l *queue.Leased, lease time.Duration) error {
	if c.cut.Load() {
		return errCutOff
	}
	return c.Queue.Extend(ctx, l, lease)
}

func (c *cutOffQueue) Complete(ctx context.Context, l *queue.Leased, o queue.Outcome) error {
	if c.cut.Load() {
		return errCutOff
	}
	return c.Queue.Complete(ctx, l, o)
}

func (c *cutOffQueue) Requeue(ctx context.Context, l *queue.Leased, o queue.RequeueOptions) error {
	if c.cut.Load() {
		return errCutOff
	}
	return c.Queue.Requeue(ctx, l, o)
}

func (c *cutOffQueue) Recover(ctx context.Context) (int, error) {
	if c.cut.Load() {
		return 0, errCutOff
	}
	return c.Queue.Recover(ctx)
}

// cutOnReserve grants the first reservation a slot delay ahead (as the
// fallback limiter spreads a batch over seconds) and cuts q off from Redis
// as it does.
type cutOnReserve struct {
	limiter.Limiter
	q     *cutOffQueue
	delay time.Duration
	once  sync.Once
}

func (c *cutOnReserve) Reserve(ctx context.Context, req limiter.Request) (limiter.Decision, error) {
	d, err := c.Limiter.Reserve(ctx, req)
	c.once.Do(func() {
		c.q.cut.Store(true)
		d.Delay = c.delay
	})
	return d, err
}

// TestCutOffReplicaDoesNotSend: replica A takes a message, then loses Redis
// while the others keep it; its slot is further ahead than its lease can be
// confirmed. The lease runs out on Redis's clock and replica B's recoverer
// sends the message. A, whose heartbeats have failed since, must not send
// it as well: a provider that ignores idempotency keys would deliver it
// twice. A puts it back once Redis answers again, finds B has it, and the
// provider saw it once, from B.
//
// It fails when sendOne does not check leaseConfirmed (A sends after its
// slot delay), and when the heartbeat stores confirmed before the extend
// is granted.
func TestCutOffReplicaDoesNotSend(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	acct, shared, m := oneQueued(t)

	aq := &cutOffQueue{Queue: shared}
	var aCalls atomic.Int32
	aProv := funcProvider(func(context.Context, *provider.Request) (provider.Result, error) {
		aCalls.Add(1)
		return provider.Result{ProviderID: "a"}, nil
	})
	a, _ := newDispatcher(t, Config{Queue: aq, Provider: aProv, Owner: "a", Workers: 1, Lease: lease,
		Limiter: &cutOnReserve{Limiter: acct.limiter(t, nil, defaultLimits), q: aq, delay: 2 * lease}, RecoverEvery: 100 * time.Millisecond})
	waitUntil(t, "replica A to take the message and lose Redis", aq.cut.Load)

	s, p, _ := startSim(t, sim.Config{Limit: 100})
	newDispatcher(t, Config{Queue: shared, Limiter: acct.limiter(t, nil, defaultLimits), Provider: p, Owner: "b",
		Lease: lease, RecoverEvery: 100 * time.Millisecond})
	if got := waitTerminal(t, shared, m.ID)[m.ID]; got.Status != sms.StatusSent {
		t.Fatalf("message is %s, want sent by replica B", got.Status)
	}
	unconfirmed := a.m.requeues.WithLabelValues("transactional", requeueUnconfirmed)
	waitUntil(t, "replica A to decide about its slot", func() bool { return value(unconfirmed) == 1 || aCalls.Load() > 0 })
	aq.cut.Store(false) // the network heals: A's put-back finds B had the message
	waitUntil(t, "replica A to let the message go", func() bool { return len(a.inFlight()) == 0 })

	if n := aCalls.Load(); n != 0 {
		t.Errorf("replica A sent the message %d times after its lease had run out unconfirmed", n)
	}
	if st := s.Stats(); st.Accepted != 1 || st.Duplicates != 0 {
		t.Errorf("provider accepted %d with %d duplicates, want once", st.Accepted, st.Duplicates)
	}
}

func testMetrics(t *testing.T) *metrics {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestHeartbeatLoop: every Lease/3 the heartbeat extends each held lease by
// a full lease; a lease found lost is marked so that it is never sent.
func TestHeartbeatLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 3 * time.Second
		keep := &flight{l: &queue.Leased{Message: &sms.Message{ID: "keep"}, Token: "k"}}
		gone := &flight{l: &queue.Leased{Message: &sms.Message{ID: "gone"}, Token: "g"}}
		var (
			mu      sync.Mutex
			extends = map[string][]time.Duration{}
		)
		start := time.Now()
		h := &heartbeat{
			flights: func() []*flight { return []*flight{keep, gone} },
			extend: func(_ context.Context, l *queue.Leased, d time.Duration) error {
				mu.Lock()
				defer mu.Unlock()
				if d != lease {
					t.Errorf("extended by %s, want the full lease %s", d, lease)
				}
				extends[l.Message.ID] = append(extends[l.Message.ID], time.Since(start))
				if l.Message.ID == "gone" {
					return queue.ErrLeaseLost
				}
				return nil
			},
			lease: lease, log: slog.New(slog.DiscardHandler), m: testMetrics(t), noteError: func() {},
			clock: func() int64 { return int64(time.Since(start)) },
		}
		h.loop = newLoop(lease/3, h.runOnce)
		h.Start(t.Context())
		time.Sleep(3*time.Second + time.Millisecond)
		synctest.Wait()
		h.Stop()
		mu.Lock()
		defer mu.Unlock()
		want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
		if got := extends["keep"]; len(got) != len(want) || got[0] != want[0] || got[2] != want[2] {
			t.Errorf("extends at %v, want %v", got, want)
		}
		if keep.lost.Load() || !gone.lost.Load() {
			t.Errorf("lost flags keep=%v gone=%v, want false/true", keep.lost.Load(), gone.lost.Load())
		}
		// A granted extend confirms the lease from when it was asked; a
		// refused one confirms nothing.
		if c, g := time.Duration(keep.confirmed.Load()), time.Duration(gone.confirmed.Load()); c != 3*time.Second || g != 0 {
			t.Errorf("confirmed keep=%s gone=%s, want 3s and 0s", c, g)
		}
		time.Sleep(5 * time.Second) // stopped: no more extends
		if n := len(extends["keep"]); n != 3 {
			t.Errorf("%d extends after Stop, want none", n-3)
		}
	})
}

// TestRecovererLoop: the recoverer calls Recover once per period until
// stopped; a failing Recover does not end the loop, but the recoverer then
// holds back for its grace (a lease), so that live holders whose acks failed
// with it can ack first.
func TestRecovererLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls int
		var errAt time.Time
		r := &recoverer{
			grace: time.Second,
			sinceErr: func() (time.Duration, bool) {
				return time.Since(errAt), !errAt.IsZero()
			},
			noteError: func() { errAt = time.Now() },
			recover: func(context.Context) (int, error) {
				calls++
				if calls == 1 {
					return 0, context.DeadlineExceeded // a failed round
				}
				return 2, nil
			},
			log: slog.New(slog.DiscardHandler), m: testMetrics(t),
		}
		r.loop = newLoop(500*time.Millisecond, r.runOnce)
		r.Start(t.Context())
		time.Sleep(2*time.Second + time.Millisecond)
		synctest.Wait()
		r.Stop()
		// 0.5 s fails; 1.0 s is within the 1 s grace; 1.5 s and 2.0 s run.
		if calls != 3 {
			t.Errorf("Recover called %d times in 2 s at a 500 ms period with a failure at 0.5 s and 1 s of grace, want 3", calls)
		}
		if v := value(r.m.loopErrors.WithLabelValues("recover")); v != 1 {
			t.Errorf("recover errors %v, want 1", v)
		}
	})
}

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

// sendNowRig is a fresh account on a simulator of 100/s and a fast-path
// Dispatcher on it, lim its shared limiter.
type sendNowRig struct {
	acct account
	s    *sim.Sim
	p    provider.Provider
	lim  limiter.Limiter
	d    *Dispatcher
}

func newSendNowRig(t *testing.T, limits limiter.Config) sendNowRig {
	t.Helper()
	r := sendNowRig{acct: newAccount(t)}
	r.s, r.p, _ = startSim(t, sim.Config{Limit: 100})
	r.lim = r.acct.limiter(t, nil, limits)
	r.d = newSendNow(t, r.acct, r.lim, r.p)
	return r
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
	rig := newSendNowRig(t, defaultLimits)
	s, d := rig.s, rig.d
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
	rig := newSendNowRig(t, limiterConfig(1, 1))
	s, d := rig.s, rig.d
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
	rig := newSendNowRig(t, defaultLimits)
	s, d, lim := rig.s, rig.d, rig.lim
	throttle := sim.Duration(2 * time.Second)
	if err := s.Apply(sim.Control{ThrottleAllFor: &throttle}); err != nil {
		t.Fatal(err)
	}
	_, err := d.SendNow(context.Background(), newMsg(sms.ClassOTP), time.Second)
	var ns NoSlotError
	if !errors.As(err, &ns) || ns.Reason != "throttled" || ns.RetryAfter < time.Second {
		t.Fatalf("SendNow = %v, want NoSlotError{throttled} with the provider's Retry-After", err)
	}
	// Another replica (its own Dispatcher, same Redis) is paused too.
	other := newSendNow(t, rig.acct, rig.acct.limiter(t, nil, defaultLimits), rig.p)
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
	spare recorded[int]
	hasty recorded[bool]
}

func (r *spareRecorder) Reserve(ctx context.Context, req limiter.Request) (limiter.Decision, error) {
	r.spare.add(req.Class, req.Spare)
	r.hasty.add(req.Class, req.Hasty)
	return r.Limiter.Reserve(ctx, req)
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
	rec := &spareRecorder{Limiter: acct.limiter(t, nil, defaultLimits)}
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
		got := rec.spare.of(class)
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
	if n := len(rec.spare.of("otp")); n != 2 {
		t.Errorf("%d OTP reservations, want 2 (queued and fast path)", n)
	}
	for class, want := range map[string]bool{"marketing": false, "transactional": false, "otp": true} {
		for _, h := range rec.hasty.of(class) {
			if h != want {
				t.Errorf("%s reserved hasty %v, want %v", class, rec.hasty.of(class), want)
				break
			}
		}
	}
}
