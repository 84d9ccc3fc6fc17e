package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"

	"smsgw/internal/limiter"
	"smsgw/internal/logsample"
	"smsgw/internal/provider"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// Defaults of the tuning knobs the gateway's configuration does not
// expose. The product defaults (workers, lease, attempts, backoff) live in
// the gateway's configuration alone: the caller sets those fields.
const (
	defaultBulkMaxWait = 5 * time.Millisecond
	defaultBulkBatch   = 4
	defaultOTPMaxWait  = time.Second
	defaultHoldMax     = 250 * time.Millisecond
	defaultOTPPoll     = 100 * time.Millisecond
	defaultBulkPoll    = 250 * time.Millisecond
	// defaultBackstopPoll is both lanes' poll when the queue announces
	// ready messages (queue.Notifier): the poll then only catches a
	// wake-up that was lost.
	defaultBackstopPoll    = 5 * time.Second
	defaultBreakerFailures = 5
	defaultBreakerOpen     = 5 * time.Second
	defaultPoisonAfter     = 3
	defaultGuardSlowdown   = 2
	defaultGuardRefresh    = time.Second
	defaultSendNowDeadline = time.Second
	defaultLearnedCapTTL   = 10 * time.Second
	// fallbackBurstWait is how long a message costing more than the
	// Redis-down fallback's burst (but within the shared one) waits
	// before it is tried again: about when the limiter probes Redis.
	fallbackBurstWait = time.Second
)

// Config configures a Dispatcher. Queue, Limiter, Provider, Owner and the
// fields the gateway sets from its configuration (Workers, OTPWorkers,
// Lease, MaxAttempts, BackoffBase, BackoffMax, CountSegments) are the
// caller's: New refuses a zero Workers, Lease, MaxAttempts, BackoffBase or
// BackoffMax, naming the field. The tuning knobs below them take a default
// when zero.
type Config struct {
	Queue    queue.Queue
	Limiter  limiter.Limiter
	Provider provider.Provider
	// Guard counts provider 429s (NewGuard over a window of
	// internal/state: shared with Redis, in memory embedded); nil disables
	// the suspension guard.
	Guard Guard
	// Owner identifies this replica in leases (hostname, pod name).
	Owner string
	// OptOuts hears of every recipient the provider says opted out (a
	// send refused with provider.ReasonOptedOut), on both paths: the
	// gateway puts the number on the suppression list. nil: the message
	// still ends suppressed, and nothing else happens.
	OptOuts OptOuts
	// Suppression is the suppression list every take reads
	// (queue.Suppression; the gateway sets Key in Redis mode, Listed in
	// embedded mode, and OTP from protection.suppress_otp): a message
	// whose number is on the list when its turn comes is ended
	// suppressed by the queue, with no reservation, provider call or
	// attempt, and counted with outcome suppressed. Its Ended is the
	// dispatcher's own. Zero (no Key, no Listed): takes do not read the
	// list.
	Suppression queue.Suppression

	// Set by the caller from the gateway's configuration (dispatch.*,
	// provider.count_segments); no defaults here.
	Workers     int           // senders of the bulk lane (transactional, marketing); >= 1
	OTPWorkers  int           // senders that only ever send OTP; 0: none, OTP then shares the bulk lane
	Lease       time.Duration // lease per take; the heartbeat extends it every Lease/3
	MaxAttempts int           // attempts before a temporarily failing message is a dead letter; >= 1
	BackoffBase time.Duration // retry n waits a random time in [0, min(BackoffMax, BackoffBase·2^(n-1))]
	BackoffMax  time.Duration // >= BackoffBase
	// CountSegments makes a message cost its Segments in the limiter;
	// otherwise every message costs 1.
	CountSegments bool
	// Pacing is the shape the shared limiter was built with (the
	// gateway's limits.*). A single message whose cost it grants
	// (limiter.Config.MaxCost) but the limiter refused with
	// ErrCostExceedsBurst met the Redis-down fallback's smaller burst: it
	// is requeued (the fast path answers no slot), not failed. Zero: every
	// such refusal is final.
	Pacing limiter.Config

	// Tuning knobs: zero takes the package's default.

	// BulkMaxWait is how far ahead a transactional or marketing
	// reservation may be. Bulk reservations also leave one unit of the
	// global burst free (limiter.Request.Spare, bulkSpare): a bulk slot
	// booked ahead never makes the next OTP wait.
	BulkMaxWait time.Duration
	// BulkBatch is how many units of rate the bulk pacer reserves in one
	// limiter call: it takes messages of one class while senders are free
	// until their cost reaches BulkBatch, reserves them together and hands
	// them to senders with the same delay. With N replicas saturating a
	// key every slot opening is asked for by N pacers; batching divides
	// those limiter calls by the batch size. It must not exceed the
	// limiter's burst (a larger batch is split and the cap learned); 1
	// turns batching off. A batch of k units moves the global key k·T
	// ahead at once; it is granted only when that leaves one unit of the
	// burst for an OTP (bulkSpare), so k <= burst − 1 (4 at burst 5) goes
	// whole.
	BulkBatch int
	// OTPMaxWait is how far ahead a queued OTP reserves (capped by its TTL).
	OTPMaxWait time.Duration
	// HoldMax is the longest a pacer holds a leased message waiting for a
	// slot; a longer RetryAfter (a pause, a saturated cap) requeues the
	// message without spending an attempt and the lane takes again.
	HoldMax time.Duration
	// OTPPoll and BulkPoll bound how long an idle lane waits before asking
	// the queue again. The API calls Notify after every enqueue, which wakes
	// this process's lane at once; a queue shared by processes that
	// announces ready messages (queue.Notifier: Redis) wakes an idle
	// replica's lanes the same way, and the poll (then 5 s by default) only catches a
	// lost wake-up. Without announcements the poll is how messages enqueued
	// elsewhere are found; each costs one Redis round trip.
	OTPPoll  time.Duration
	BulkPoll time.Duration
	// SendTimeout bounds one provider call; 0 leaves it to the adapter.
	SendTimeout time.Duration
	// RecoverEvery is the recoverer's period; default Lease/2.
	RecoverEvery time.Duration

	// BreakerFailures consecutive transient provider failures open the
	// breaker for BreakerOpen.
	BreakerFailures int
	BreakerOpen     time.Duration

	// PoisonAfter is how many times sending one message may crash its
	// sender (a panic, recovered) before the message is a dead letter
	// marked poison; default 3 (dispatch.poison_after).
	PoisonAfter int

	// While the guard is active every reservation costs GuardSlowdown times
	// the message's cost (capped by the limiter's burst) and every pause
	// lasts GuardSlowdown times the provider's Retry-After: every replica
	// sends at 1/GuardSlowdown of the rate.
	GuardSlowdown int
	// GuardRefresh is how often each replica reads the shared 429 count.
	GuardRefresh time.Duration
	// LateSlot bounds how late after its limiter slot a send may start: a
	// send that would start later is not made, its slot is forfeited
	// (smsgw_dispatch_late_slots_total) and the message goes back without
	// spending an attempt (the fast path reserves once more). The limiter
	// spaces slots; a stall of this process (starved of CPU, a long GC, a
	// slow Redis answer) between the grant and the send would otherwise
	// start sends of slots granted over a stretch of time together, which
	// a provider counting a sliding window sees as a burst above the
	// rate. The gateway derives it from the contract's margin
	// (LateSlotFor). 0: no bound.
	LateSlot time.Duration
	// LearnedCapTTL is how long a cap learned from the limiter's
	// ErrCostExceedsBurst (the largest batch, the largest slowed cost of a
	// class) is kept. A cap learned while the limiter fell back to its
	// smaller burst (Redis down) must not outlive the fallback: after it
	// the next reservation asks for the full size again and learns the
	// cap anew if it still holds (one refused reservation per class).
	LearnedCapTTL time.Duration

	// Hold says when m may be sent if it must not be sent at at (the
	// recipient's quiet hours for its class); zero: it may go. A held
	// message is put back until then without spending an attempt or any
	// rate. nil: nothing is held.
	Hold func(m *sms.Message, at time.Time) time.Time

	Logger     *slog.Logger          // nil: discard
	Registerer prometheus.Registerer // nil: a private registry
	Now        func() time.Time      // nil: time.Now; read for TTLs and queue latency only (waits use the monotonic clock)
}

func (c *Config) setDefaults() error {
	errs := c.required()
	if _, ok := c.Queue.(queue.Notifier); ok {
		for _, p := range []*time.Duration{&c.OTPPoll, &c.BulkPoll} {
			if *p == 0 {
				*p = defaultBackstopPoll
			}
		}
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"BulkMaxWait", &c.BulkMaxWait, defaultBulkMaxWait},
		{"OTPMaxWait", &c.OTPMaxWait, defaultOTPMaxWait},
		{"HoldMax", &c.HoldMax, defaultHoldMax},
		{"OTPPoll", &c.OTPPoll, defaultOTPPoll},
		{"BulkPoll", &c.BulkPoll, defaultBulkPoll},
		{"BreakerOpen", &c.BreakerOpen, defaultBreakerOpen},
		{"GuardRefresh", &c.GuardRefresh, defaultGuardRefresh},
		{"LearnedCapTTL", &c.LearnedCapTTL, defaultLearnedCapTTL},
		{"RecoverEvery", &c.RecoverEvery, max(c.Lease/2, time.Millisecond)},
	} {
		switch {
		case *f.v < 0:
			errs = append(errs, fmt.Errorf("%s %s must not be negative", f.name, *f.v))
		case *f.v == 0:
			*f.v = f.def
		}
	}
	if c.SendTimeout < 0 || c.LateSlot < 0 {
		errs = append(errs, fmt.Errorf("SendTimeout %s and LateSlot %s must not be negative", c.SendTimeout, c.LateSlot))
	}
	if c.HoldMax > c.Lease/2 {
		c.HoldMax = c.Lease / 2 // never sit on a lease close to its expiry
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{
		{"BulkBatch", &c.BulkBatch, defaultBulkBatch},
		{"BreakerFailures", &c.BreakerFailures, defaultBreakerFailures},
		{"GuardSlowdown", &c.GuardSlowdown, defaultGuardSlowdown},
		{"PoisonAfter", &c.PoisonAfter, defaultPoisonAfter},
	} {
		switch {
		case *f.v < 0:
			errs = append(errs, fmt.Errorf("%s %d must not be negative", f.name, *f.v))
		case *f.v == 0:
			*f.v = f.def
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if len(errs) > 0 {
		return fmt.Errorf("dispatch: config: %w", errors.Join(errs...))
	}
	return nil
}

// required checks the fields the caller must set: the dependencies and the
// product settings, whose defaults belong to the gateway's configuration.
func (c *Config) required() []error {
	var errs []error
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"Queue", c.Queue != nil}, {"Limiter", c.Limiter != nil}, {"Provider", c.Provider != nil}, {"Owner", c.Owner != ""},
	} {
		if !f.set {
			errs = append(errs, fmt.Errorf("%s is required", f.name))
		}
	}
	if c.Workers < 1 {
		//nolint:staticcheck // ST1005: it names the Config field, as its neighbours do
		errs = append(errs, fmt.Errorf("Workers %d must be >= 1", c.Workers))
	}
	if c.OTPWorkers < 0 {
		errs = append(errs, fmt.Errorf("OTPWorkers %d must not be negative", c.OTPWorkers))
	}
	if c.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("MaxAttempts %d must be >= 1", c.MaxAttempts))
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"Lease", c.Lease}, {"BackoffBase", c.BackoffBase}, {"BackoffMax", c.BackoffMax}} {
		if f.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %s must be > 0", f.name, f.v))
		}
	}
	if c.BackoffMax < c.BackoffBase {
		errs = append(errs, fmt.Errorf("BackoffMax %s must be >= BackoffBase %s", c.BackoffMax, c.BackoffBase))
	}
	return errs
}

// Dispatcher runs the send loop of one process. Create it with New, run it
// with Start, end it with Stop.
type Dispatcher struct {
	cfg Config
	log *slog.Logger
	// takeFailed and guardFailed sample the warnings of a queue or guard
	// that fails on every try during an outage (logsample).
	takeFailed, guardFailed logsample.Sampler
	// listedLog samples the INFO line of messages a take ended because
	// their number was on the suppression list (listedEnded).
	listedLog logsample.Sampler
	m         *metrics
	breaker   *gobreaker.TwoStepCircuitBreaker[struct{}]
	lanes     []*lane
	// laneEmpty is signalled when a lane finds its queue empty
	// (readyToTake); emptyTakes counts those takes, and missedAt is its
	// value when the listener last got news no lane here could act on.
	laneEmpty  chan struct{}
	emptyTakes atomic.Uint64
	missedAt   atomic.Uint64

	// pausedUntil is this process's copy of the shared pause (nanoseconds
	// since epoch, on the monotonic clock): set on a 429 here or a Paused
	// reservation, so that senders holding a slot granted before the pause
	// do not send into it.
	pausedUntil atomic.Int64
	epoch       time.Time
	// busyAt is when this process last took a message or began a fast-path
	// send (nanoseconds since epoch; 0: never). Idle tells the periodic
	// reads of shared state that they may slow down.
	busyAt atomic.Int64
	// guardReadAt is when the guard's count was last read (since epoch).
	guardReadAt atomic.Int64
	// queueErrAt is when a queue call last failed (nanoseconds since
	// epoch; 0: never). The recoverer holds back for a lease after it.
	queueErrAt atomic.Int64
	// slowdown is the cost multiplier: 1, or GuardSlowdown while the guard
	// is active.
	slowdown atomic.Int64
	// costCap is, per class (indexed by sms.Class), the largest slowed
	// cost the limiter accepts (0: not learned, or forgotten).
	costCap learnedCaps
	// batchCap is, per class, the largest batch cost that fits the burst
	// (0: not learned, or forgotten; BulkBatch applies).
	batchCap learnedCaps

	// suppression is what every take is given (Config.Suppression, with
	// Ended counting); nil without a list.
	suppression *queue.Suppression

	mu      sync.Mutex
	flights map[*queue.Leased]*flight
	started bool
	stopped bool

	runCtx     context.Context    // every queue, limiter and provider call; canceled by a crash or the end of Stop
	cancelRun  context.CancelFunc //
	takeCtx    context.Context    // pacers; canceled first by Stop
	cancelTake context.CancelFunc
	// releaseCtx, set by Stop when its bound passes, is what senders use to
	// put back messages whose send was cut short. Unset (a crash: the
	// parent context ended) they put back nothing and the leases expire.
	releaseCtx atomic.Pointer[context.Context]

	pacers    sync.WaitGroup
	senders   sync.WaitGroup
	listening sync.WaitGroup // the wake-up listener (queue.Notifier)
	loops     []backgroundLoop
}

// backgroundLoop is a periodic loop of this package (see loops.go).
type backgroundLoop interface {
	Start(context.Context)
	Stop()
}

// flight is one leased message held by this process.
type flight struct {
	l     *queue.Leased
	lane  *lane
	lost  atomic.Bool // the heartbeat found the lease gone: never send it
	ready time.Time   // when it became ready in the queue (latency origin)
	// confirmed is when the queue last confirmed the lease for a full
	// Lease from then: the moment the take or the last successful Extend
	// was asked (nanoseconds since the dispatcher's epoch). See
	// leaseConfirmed.
	confirmed atomic.Int64
	// acking: its outcome is being written (Complete, Requeue, Dead); a
	// lease the heartbeat then finds gone was most likely ended by it.
	acking atomic.Bool
}

// New checks cfg and returns a Dispatcher; it starts nothing.
func New(cfg Config) (*Dispatcher, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	d := &Dispatcher{
		cfg:       cfg,
		log:       cfg.Logger.With("component", "dispatch", "owner", cfg.Owner, "provider", cfg.Provider.Name()),
		m:         m,
		flights:   make(map[*queue.Leased]*flight),
		laneEmpty: make(chan struct{}, 1),
		epoch:     time.Now(),
	}
	d.slowdown.Store(1)
	if s := cfg.Suppression; s.Key != "" || s.Listed != nil {
		s.Ended = d.listedEnded
		d.suppression = &s
	}
	d.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "provider-" + cfg.Provider.Name(),
		MaxRequests: 1,
		Timeout:     cfg.BreakerOpen,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= uint32(cfg.BreakerFailures) },
		// Only failures that say the provider is unwell count: a throttle,
		// a rejected number or our own cancellation says nothing about it.
		IsSuccessful: func(err error) bool { return err == nil || !breakerFailure(err) },
		IsExcluded:   func(err error) bool { return errors.Is(err, context.Canceled) },
		OnStateChange: func(name string, from, to gobreaker.State) {
			d.log.Warn("provider breaker changed state", "breaker", name, "from", from.String(), "to", to.String())
		},
	})
	if cfg.OTPWorkers > 0 {
		d.lanes = append(d.lanes,
			newLane(laneOTP, []sms.Class{sms.ClassOTP}, cfg.OTPWorkers, cfg.OTPPoll),
			newLane(laneBulk, []sms.Class{sms.ClassTransactional, sms.ClassMarketing}, cfg.Workers, cfg.BulkPoll))
	} else {
		d.lanes = append(d.lanes, newLane(laneBulk, sms.Classes, cfg.Workers, cfg.OTPPoll))
	}
	return d, nil
}

// breakerFailure tells whether err means the provider is failing (5xx,
// timeout, network, unparseable answer) rather than answering.
func breakerFailure(err error) bool {
	pe := provider.AsError(err)
	if pe == nil {
		return true
	}
	switch pe.Reason {
	case provider.ReasonUnavailable, provider.ReasonTimeout, provider.ReasonNetwork, provider.ReasonBadResponse:
		return true
	}
	return false
}

// Start runs the lanes and the background loops until Stop or until ctx
// ends. Ending ctx is a crash: nothing is put back, leases expire and the
// recoverer of another replica hands the messages on.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		return errors.New("dispatch: already started")
	}
	d.started = true
	d.runCtx, d.cancelRun = context.WithCancel(ctx)
	d.takeCtx, d.cancelTake = context.WithCancel(d.runCtx)

	d.loops = []backgroundLoop{newHeartbeat(d), newRecoverer(d)}
	if d.cfg.Guard != nil {
		d.loops = append(d.loops, newLoop("guard", d.cfg.GuardRefresh, d.refreshGuard))
	}
	for _, l := range d.loops {
		l.Start(d.runCtx)
	}
	if n, ok := d.cfg.Queue.(queue.Notifier); ok {
		d.listening.Add(1)
		go func() {
			defer d.listening.Done()
			// Ends with the takes: a stopping process hands its wake-ups on.
			n.Listen(d.takeCtx, d.wakeIfIdle, d.readyToTake)
		}()
	}
	for _, ln := range d.lanes {
		d.pacers.Add(1)
		go func() {
			defer d.pacers.Done()
			d.pace(ln)
		}()
	}
	d.log.Info("send loop started", "workers", d.cfg.Workers, "otp_workers", d.cfg.OTPWorkers, "lease", d.cfg.Lease)
	return nil
}

// ErrSendsCutShort is what Stop returns (as a *CutShortError) when its
// context ended before the sends in progress finished: they were cut short
// and their messages put back without spending an attempt, the expected
// end of a stop that ran out of time (docs/operations.md section 7), not a
// failure.
var ErrSendsCutShort = errors.New("in-flight sends cut short")

// CutShortError is Stop's error when its bound passed with sends in
// progress: Sends of them were cut short (counted when the bound passed)
// and put back. It is ErrSendsCutShort and Cause (the context's error) for
// errors.Is.
type CutShortError struct {
	Sends int
	Cause error
}

func (e *CutShortError) Error() string {
	return fmt.Sprintf("dispatch: stop: %v (%d): %v", ErrSendsCutShort, e.Sends, e.Cause)
}

// Unwrap makes the error both ErrSendsCutShort and its cause.
func (e *CutShortError) Unwrap() []error { return []error{ErrSendsCutShort, e.Cause} }

// SendsCutShort is Sends, for callers that may not import this package
// (cmd/smsgw: see internal/layering) and recognise the error by it.
func (e *CutShortError) SendsCutShort() int { return e.Sends }

// sending counts the sends in progress: the flights not being acked.
func (d *Dispatcher) sending() int {
	n := 0
	for _, f := range d.inFlight() {
		if !f.acking.Load() {
			n++
		}
	}
	return n
}

// Stop ends the send loop gracefully: no more takes; messages held for a
// slot are put back at once; sends in progress finish while ctx allows.
// When ctx ends first those sends are cut short and their messages put back
// without spending an attempt (the provider may have them: the id is the
// idempotency key of the next attempt); Stop then returns a *CutShortError
// (ErrSendsCutShort).
func (d *Dispatcher) Stop(ctx context.Context) error {
	d.mu.Lock()
	if !d.started || d.stopped {
		d.mu.Unlock()
		return nil
	}
	d.stopped = true
	d.mu.Unlock()

	d.cancelTake()
	d.pacers.Wait()

	done := make(chan struct{})
	go func() { d.senders.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		cut := d.sending()
		rctx := context.WithoutCancel(ctx)
		d.releaseCtx.Store(&rctx)
		d.cancelRun()
		<-done
		err = &CutShortError{Sends: cut, Cause: ctx.Err()}
	}
	for _, l := range d.loops {
		l.Stop()
	}
	d.cancelRun()
	d.listening.Wait()
	d.log.Info("send loop stopped", "graceful", err == nil)
	return err
}

// Notify wakes the lane serving class c, so that a message just enqueued is
// taken without waiting for the next poll. The API calls it after each
// enqueue of this process, the wake-up listener (queue.Notifier) for those
// of every other; it never blocks.
func (d *Dispatcher) Notify(c sms.Class) {
	for _, ln := range d.lanes {
		if ln.serves(c) {
			select {
			case ln.wake <- struct{}{}:
			default:
			}
		}
	}
}

// wakeIfIdle wakes the lanes serving c (Notify) and reports whether one of
// them waits on an empty queue, so takes at once (queue.Notifier).
func (d *Dispatcher) wakeIfIdle(c sms.Class) bool {
	seen := d.emptyTakes.Load() // before the look: an empty take after it counts as new
	idle := d.TakesHere(c)
	if !idle {
		d.missedAt.Store(seen)
	}
	d.Notify(c)
	return idle
}

// TakesHere reports whether a lane of this process serving class c found
// its queue empty and waits: Notify makes it take at once, so a message of
// c enqueued by this process needs no other replica woken for it
// (queue.Checks.TakenHere).
func (d *Dispatcher) TakesHere(c sms.Class) bool {
	for _, ln := range d.lanes {
		if ln.serves(c) && ln.empty.Load() {
			return true
		}
	}
	return false
}

// readyToTake waits until a lane of this process found its queue empty
// (it would take at once if woken), or with fresh until a lane did so
// after the news no lane here could act on (wakeIfIdle); false when ctx
// ends first. The wake-up listener waits for news only then: a replica
// whose lanes are all busy leaves the news to an idle one.
func (d *Dispatcher) readyToTake(ctx context.Context, fresh bool) bool {
	for {
		if fresh {
			if d.emptyTakes.Load() > d.missedAt.Load() {
				return true
			}
		} else {
			for _, ln := range d.lanes {
				if ln.empty.Load() {
					return true
				}
			}
		}
		select {
		case <-d.laneEmpty:
		case <-ctx.Done():
			return false
		}
	}
}

func (d *Dispatcher) track(f *flight) {
	d.mu.Lock()
	d.flights[f.l] = f
	d.mu.Unlock()
	d.m.inFlight.Inc()
}

func (d *Dispatcher) untrack(f *flight) {
	d.mu.Lock()
	_, ok := d.flights[f.l]
	delete(d.flights, f.l)
	d.mu.Unlock()
	if ok {
		d.m.inFlight.Dec()
	}
}

// tracked reports whether f is still in flight and not being acked.
func (d *Dispatcher) tracked(f *flight) bool {
	if f.acking.Load() {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.flights[f.l]
	return ok
}

func (d *Dispatcher) inFlight() []*flight {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*flight, 0, len(d.flights))
	for _, f := range d.flights {
		out = append(out, f)
	}
	return out
}

// pauseLocal extends this process's pause to now+p (never shortens it).
func (d *Dispatcher) pauseLocal(p time.Duration) {
	until := int64(time.Since(d.epoch) + p)
	for {
		cur := d.pausedUntil.Load()
		if cur >= until || d.pausedUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

// pauseLeft is how long this process's pause still runs.
func (d *Dispatcher) pauseLeft() time.Duration {
	left := time.Duration(d.pausedUntil.Load()) - time.Since(d.epoch)
	return max(left, 0)
}

// setGuardCount applies the shared 429 count to this process.
func (d *Dispatcher) setGuardCount(n int) {
	d.m.guardCount.Set(float64(n))
	active := n >= d.cfg.Guard.ActivateAt()
	factor := int64(1)
	if active {
		factor = int64(d.cfg.GuardSlowdown)
	}
	if old := d.slowdown.Swap(factor); old != factor {
		if active {
			d.log.Warn("suspension guard active: slowing down", "throttles_in_window", n, "activate_at", d.cfg.Guard.ActivateAt(), "slowdown", factor)
		} else {
			d.log.Info("suspension guard inactive", "throttles_in_window", n)
		}
	}
	if active {
		d.m.guardActive.Set(1)
	} else {
		d.m.guardActive.Set(0)
	}
}

// GuardActive reports whether the suspension guard slows this process down.
func (d *Dispatcher) GuardActive() bool { return d.slowdown.Load() > 1 }

// Slowdown is the factor every reservation's cost is multiplied by now: 1,
// or GuardSlowdown while the suspension guard is active. Estimates of when
// a message goes divide the rate by it.
func (d *Dispatcher) Slowdown() int { return int(d.slowdown.Load()) }

// noteBusy records that this process is sending now.
// sinceEpoch is the time on the monotonic clock, as nanoseconds since the
// dispatcher's epoch.
func (d *Dispatcher) sinceEpoch() int64 { return int64(time.Since(d.epoch)) }

func (d *Dispatcher) noteBusy() { d.busyAt.Store(max(1, int64(time.Since(d.epoch)))) }

// Idle reports whether this process has held no message and begun no
// fast-path send for at least quiet. Loops that read shared state only a
// sender needs (the guard's count, the operator pause, the stats totals)
// read it less often while their replica is idle, so that an idle fleet
// costs Redis little; what a send must know is read again when sending
// starts.
func (d *Dispatcher) Idle(quiet time.Duration) bool {
	d.mu.Lock()
	n := len(d.flights)
	d.mu.Unlock()
	return n == 0 && time.Since(d.epoch)-time.Duration(d.busyAt.Load()) >= quiet
}

// noteQueueError records that the queue (Redis) just failed a call.
func (d *Dispatcher) noteQueueError() { d.queueErrAt.Store(max(1, int64(time.Since(d.epoch)))) }

// sinceQueueError is how long ago a queue call last failed; ok is false
// when none ever did.
func (d *Dispatcher) sinceQueueError() (time.Duration, bool) {
	at := d.queueErrAt.Load()
	if at == 0 {
		return 0, false
	}
	return time.Since(d.epoch) - time.Duration(at), true
}

// MinLateSlot is the least LateSlotFor gives: the followers of a batch
// wait up to batchProbeWait for the leader's answer, and must not all be
// forfeited on a healthy machine.
const MinLateSlot = 25 * time.Millisecond

// LateSlotFor is the late-slot bound (Config.LateSlot) that keeps a send
// loop within a provider contract of contractRPS over any second while
// the limiter paces at targetRPS with burst: the limiter grants at most
// targetRPS·W + burst in any window W; sends that start up to L late fit
// targetRPS·(W+L) + burst into it, which stays within contractRPS·W for
// W = 1 s while L <= (contractRPS − targetRPS − burst) / targetRPS. It is
// at least MinLateSlot (a contract with a smaller margin than that gets
// MinLateSlot: the bound then still limits a stall's clump to
// targetRPS·MinLateSlot units).
func LateSlotFor(contractRPS, targetRPS float64, burst int) time.Duration {
	if targetRPS <= 0 {
		return MinLateSlot
	}
	margin := (contractRPS - targetRPS - float64(burst)) / targetRPS
	return max(time.Duration(margin*float64(time.Second)), MinLateSlot)
}
