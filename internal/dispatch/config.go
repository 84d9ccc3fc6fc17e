package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/limiter"
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

// Holder tells whether an operator's pause holds a class, or a producer,
// now.
type Holder interface {
	ClassHeld(ctx context.Context, c sms.Class) bool
	ProducerHeld(ctx context.Context, producer string) bool
}

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
	// Replies hears of every message sent (outcome.go); nil: nobody.
	Replies Replies
	// Suppression is the suppression list every take reads
	// (queue.Suppression; the gateway sets Key in Redis mode, Listed in
	// embedded mode, and OTP from protection.suppress_otp): a message
	// whose number is on the list when its turn comes is ended
	// suppressed by the queue, with no reservation, provider call or
	// attempt, and counted with outcome suppressed. Its Ended is the
	// dispatcher's own. Zero (no Key, no Listed): takes do not read the
	// list.
	Suppression queue.Suppression
	// Held reports the operator's class and producer pauses
	// (admission.OperatorPause): a held class is left out of every take;
	// a taken message of a held producer is set aside on its producer's
	// shelf (queue.Shelver, with the Shelf that Shelf gives), once, and
	// comes back when the pause ends (admission.ShelfKeeper); the OTP fast
	// path answers no slot (paused) while its class or producer is held.
	// nil: nothing is held.
	Held  Holder
	Shelf func(producer string) queue.Shelf

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
