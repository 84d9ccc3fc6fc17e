package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// The one breaker policy of every limiter that decides on Redis with a
// local fallback (Shared for sends, SharedKeys for producer ingress):
//
//   - one failed Redis call opens the breaker (a limiter call must not wait
//     on a dead Redis twice);
//   - while open, nothing calls Redis: every decision is taken locally;
//   - after redisRetryEvery one caller probes Redis (half-open); its success
//     closes the breaker, its failure keeps it open another redisRetryEvery;
//   - a call the caller gave up on (its context ended) says nothing about
//     Redis and counts neither way; ErrCostExceedsBurst is an answer, not a
//     failure;
//   - the mode changes are logged once each (Warn when Redis is lost, Info
//     when it is back), never per decision.

// redisRetryEvery is how long the breaker stays open after a Redis failure:
// Redis is tried again at most once a second, by one caller; every other
// caller decides locally meanwhile.
const redisRetryEvery = time.Second

// callerShare: a Redis call takes at most 1/callerShare of the time its
// caller has left before its deadline, or minRedisCall when that is more
// and the caller can spare it.
const callerShare = 8

// minRedisCall is the least time a Redis call must have had for its
// timeout to say that Redis stopped answering. A decision is one round trip
// on a warm connection, but a fresh one (the pool grows under load, and
// go-redis drops every connection a call timed out on) first dials and
// runs its handshake (HELLO, CLIENT commands) under the call's context,
// and a Redis that does not hold the script yet (started, restarted or
// failed over) answers EVALSHA with NOSCRIPT before the EVAL: five round
// trips. A caller that cannot spare minRedisCall still gets its share of
// its deadline, but the timeout of so short a call opens no breaker: that
// caller alone is refused (errCallerHurried), not its whole replica sent
// to the fallback rate for redisRetryEvery.
const minRedisCall = 250 * time.Millisecond

// defaultRedisTimeout bounds one Redis call when the caller sets none.
const defaultRedisTimeout = 500 * time.Millisecond

// errCallerGone marks a Redis call that failed because the caller's context
// ended: it says nothing about Redis, so the breaker ignores it.
var errCallerGone = errors.New("limiter: caller context done")

// errCallerHurried marks a Redis call that timed out within the short
// share of a caller that could not spare minRedisCall: it says nothing
// about Redis either, so the breaker ignores it, and the limiters refuse
// that caller rather than grant locally beside the shared schedule (the
// replica's other callers still decide on Redis, and the two together
// could exceed the limit). It is a deadline error (a net.Error that
// times out): the caller's answer is a 503 with Retry-After.
var errCallerHurried = fmt.Errorf("limiter: no answer from redis within the caller's time: %w", context.DeadlineExceeded)

// breakerConfig shapes a breaker.
type breakerConfig struct {
	name    string        // the breaker's name
	timeout time.Duration // one Redis call; 0: defaultRedisTimeout
	log     *slog.Logger  // nil: discard
	lost    string        // logged at Warn when Redis is lost
	back    string        // logged at Info when Redis answers again
	onOpen  func()        // optional; runs under the breaker's lock when it opens
	onMode  func(Mode)    // optional; every mode change (metrics)
	outage  *Outage       // optional; told of every failed call, joined while another user failed
}

// breaker runs Redis calls under the policy above and knows the mode.
type breaker struct {
	cfg  breakerConfig
	cb   *gobreaker.CircuitBreaker[struct{}]
	mode atomic.Value // Mode: ModeShared or ModeFallback
}

func newBreaker(cfg breakerConfig) *breaker {
	if cfg.log == nil {
		cfg.log = slog.New(slog.DiscardHandler)
	}
	if cfg.timeout <= 0 {
		cfg.timeout = defaultRedisTimeout
	}
	b := &breaker{cfg: cfg}
	b.mode.Store(ModeShared)
	b.cb = gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        cfg.name,
		MaxRequests: 1, // one probe when half-open; the rest decide locally
		Timeout:     redisRetryEvery,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 1 },
		IsSuccessful: func(err error) bool {
			return err == nil || errors.Is(err, ErrCostExceedsBurst)
		},
		IsExcluded: func(err error) bool {
			return errors.Is(err, errCallerGone) || errors.Is(err, errCallerHurried)
		},
		OnStateChange: b.onStateChange,
	})
	return b
}

// onStateChange runs under the breaker's lock: it only records and logs.
func (b *breaker) onStateChange(_ string, from, to gobreaker.State) {
	switch {
	case from == gobreaker.StateClosed && to == gobreaker.StateOpen:
		if b.cfg.onOpen != nil {
			b.cfg.onOpen()
		}
		b.setMode(ModeFallback)
		b.cfg.log.Warn(b.cfg.lost, "retry_every", redisRetryEvery)
	case to == gobreaker.StateClosed:
		b.setMode(ModeShared)
		b.cfg.log.Info(b.cfg.back)
	}
}

func (b *breaker) setMode(m Mode) {
	b.mode.Store(m)
	if b.cfg.onMode != nil {
		b.cfg.onMode(m)
	}
}

// Mode is ModeShared while Redis decides and ModeFallback while the
// process decides alone.
func (b *breaker) Mode() Mode {
	// State() also moves an open breaker to half-open once its timeout has
	// passed; the mode stays fallback until a probe succeeds.
	_ = b.cb.State()
	return b.mode.Load().(Mode)
}

// errOutageElsewhere opens a breaker that joins the process's outage.
var errOutageElsewhere = errors.New("limiter: another redis user of this process failed within a second")

// joinOutage opens this breaker, while it is closed, when another Redis
// user of the process failed within redisRetryEvery (Outage): the replica
// meets a Redis that stopped answering once, not once per limiter, and
// this limiter's fallback starts as after a failure of its own (onOpen).
// Joining records no failure, so breakers never keep each other open:
// each finds Redis back with its own probe.
func (b *breaker) joinOutage() {
	if b.cfg.outage.Recent() && b.cb.State() == gobreaker.StateClosed {
		_, _ = b.cb.Execute(func() (struct{}, error) { return struct{}{}, errOutageElsewhere })
	}
}

// probe runs call through the breaker only while the mode is fallback,
// so that a limiter nobody asks (a replica with nothing to send, no
// producer posting) still learns that Redis is back, and its mode gauge
// with it: without it the mode stayed fallback, and SmsgwLimiterFallback
// firing, until the next decision. It costs nothing while Redis decides;
// in fallback it is one call, and the breaker lets at most one through a
// second.
func (b *breaker) probe(ctx context.Context, call func(context.Context) error) {
	if b.Mode() != ModeFallback {
		return
	}
	_ = b.do(ctx, call)
}

// do runs one Redis call through the breaker with its own timeout. While
// the breaker is open it returns at once with gobreaker.ErrOpenState (or
// ErrTooManyRequests while another caller probes).
//
// A caller with a deadline gives Redis an eighth of the time it has left
// (callerShare), and at least minRedisCall while that leaves it an eighth:
// when Redis has just stopped answering, the call fails while the caller
// can still be decided locally (an OTP's deadline held two Redis timeouts,
// the ingress quota's and the send limiter's, and the slot the fallback
// then granted came too late). A call cut shorter than minRedisCall by its
// caller's deadline that times out is no verdict on Redis: do returns
// errCallerHurried.
func (b *breaker) do(ctx context.Context, call func(context.Context) error) error {
	b.joinOutage()
	timeout, verdict := b.callTimeout(ctx)
	_, err := b.cb.Execute(func() (struct{}, error) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		err := call(cctx)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return struct{}{}, fmt.Errorf("%w: %w", errCallerGone, err)
		case !verdict && cctx.Err() != nil:
			return struct{}{}, errCallerHurried
		case !errors.Is(err, ErrCostExceedsBurst):
			b.cfg.outage.Failed()
		}
		return struct{}{}, err
	})
	return err
}

// callTimeout is how long one Redis call of a caller with ctx may take, and
// whether its timeout says that Redis stopped answering.
func (b *breaker) callTimeout(ctx context.Context) (time.Duration, bool) {
	return CallTimeout(ctx, b.cfg.timeout)
}

// CallTimeout is how long one Redis call of a caller with ctx may take when
// a call alone may take up to limit, and whether its timeout says that
// Redis stopped answering: the share of the caller's deadline of the
// breaker policy above (an eighth of the time left, at least minRedisCall
// while that leaves the caller an eighth). Every store a caller with a
// deadline meets before its decision (the OTP's per-number count, the
// ingress quota, the send limiter) bounds its Redis calls with it, so that
// a Redis that stops answering leaves the caller the time to be decided
// locally.
func CallTimeout(ctx context.Context, limit time.Duration) (time.Duration, bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		return limit, true
	}
	left := time.Until(dl)
	timeout := min(limit, max(minRedisCall, left/callerShare), left-left/callerShare)
	return timeout, timeout >= min(minRedisCall, limit)
}
