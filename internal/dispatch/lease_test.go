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

// TestHeartbeatKeepsLease: a send slower than the lease keeps its lease
// because the heartbeat extends it, so another replica's recoverer never
// hands the message on and the provider receives it once.
func TestHeartbeatKeepsLease(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	acct := newAccount(t)
	q := acct.queue(t, nil)
	m := newMsg(sms.ClassTransactional)
	enqueue(t, q, m)

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
	acct := newAccount(t)
	shared := acct.queue(t, nil)
	m := newMsg(sms.ClassTransactional)
	enqueue(t, shared, m)

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
