package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"smsgw/internal/limiter"
	"smsgw/internal/logsample"
	"smsgw/internal/provider"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

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
	// senderPauses is this process's copy of the senders' shared pauses,
	// senderSpread when each sender's next put-back message is due
	// (senders.go); sm their metrics.
	senderPauses, senderSpread limiter.SenderTimes
	sm                         *senderMetrics
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
	if d.sm, err = newSenderMetrics(cfg.Registerer, d); err != nil {
		return nil, err
	}
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
