package dispatch

// The send path, one named step per function, in the order a message meets
// them:
//
//	take → receipt check → expire check → reserve → sleep delay → breaker → send → answered → outcome
//
// take, expire check and reserve run in the lane's pacer; the rest in a
// sender goroutine. Each step logs and counts what it decides. The OTP fast
// path (sendnow.go) runs the same reservation (reserveSlot), breaker, send
// and answered steps; only the message's fate (outcome here, a typed error
// there) differs. What an answer means is decided in outcome.go.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// ackTimeout bounds a queue call made after Stop's own bound has passed.
const ackTimeout = 2 * time.Second

// Step 1: take the next ready message of the lane's classes under a lease.
// With a suppression list (Config.Suppression) the queue ends, on the way,
// the messages whose numbers are on it (listedEnded counts them).
func (d *Dispatcher) take(ctx context.Context, ln *lane, classes []sms.Class) (*flight, time.Duration, error) {
	asked := d.sinceEpoch()
	l, wait, err := d.cfg.Queue.Take(ctx, queue.TakeOptions{Owner: d.cfg.Owner + "/" + ln.name, Lease: d.cfg.Lease, Classes: classes,
		Suppression: d.suppression})
	switch {
	case errors.Is(err, queue.ErrEmpty):
		d.m.takes.WithLabelValues(ln.name, takeEmpty).Inc()
		d.takeFailed.Reset() // the queue answers: the next failure is logged at once
		return nil, wait, err
	case err != nil:
		d.m.takes.WithLabelValues(ln.name, takeError).Inc()
		if ctx.Err() == nil {
			d.takeError(ln, err)
		}
		return nil, 0, fmt.Errorf("dispatch: take: %w", err)
	}
	d.takeFailed.Reset() // the next failure is logged at once
	return d.taken(ln, l, asked), 0, nil
}

// failureLogEvery is how often a loop that fails on every try (the queue
// or the guard during an outage) logs it: once at first, then one line
// with the count per interval; the metrics count every failure.
const failureLogEvery = 30 * time.Second

// takeError counts and (sampled) logs a failed take.
func (d *Dispatcher) takeError(ln *lane, err error) {
	d.noteQueueError()
	d.m.loopErrors.WithLabelValues("take").Inc()
	if n, ok := d.takeFailed.Add(time.Now(), failureLogEvery); ok {
		d.log.Warn("take failed", "lane", ln.name, "failures", n, "err", err)
	}
}

// takeMore is take for the rest of a batch of class: up to most messages
// in one queue call (queue.TakeMore), none of them waited for.
func (d *Dispatcher) takeMore(ctx context.Context, ln *lane, class sms.Class, most, units int) ([]*flight, error) {
	asked := d.sinceEpoch()
	ls, err := d.cfg.Queue.TakeMore(ctx, queue.TakeOptions{Owner: d.cfg.Owner + "/" + ln.name, Lease: d.cfg.Lease,
		Classes: []sms.Class{class}, Suppression: d.suppression}, most, units)
	if err != nil {
		d.m.takes.WithLabelValues(ln.name, takeError).Inc()
		if ctx.Err() == nil {
			d.takeError(ln, err)
		}
		return nil, fmt.Errorf("dispatch: take: %w", err)
	}
	fs := make([]*flight, 0, len(ls))
	for _, l := range ls {
		fs = append(fs, d.taken(ln, l, asked))
	}
	return fs, nil
}

// listedEnded counts a message a take ended (queue.Suppression) because
// its number was on the suppression list when its turn came: outcome
// suppressed, with no reservation, provider call or attempt.
// A backlog to one suppressed number ends one message after another, so
// the INFO line is sampled (the first, then at most one per
// listedLogEvery, with how many it stands for); every one is logged at
// DEBUG.
func (d *Dispatcher) listedEnded(m *sms.Message) {
	d.m.outcomes.WithLabelValues(m.Class.String(), outcomeSuppressed).Inc()
	if n, ok := d.listedLog.Add(time.Now(), listedLogEvery); ok {
		d.log.Info("not sent: the number is on the suppression list", "id", m.ID, "class", m.Class.String(), "messages", n)
		return
	}
	d.log.Debug("not sent: the number is on the suppression list", "id", m.ID, "class", m.Class.String())
}

// listedLogEvery is the most often listedEnded logs at INFO.
const listedLogEvery = 10 * time.Second

// taken starts tracking a message just leased by a take asked at asked
// (since the epoch).
func (d *Dispatcher) taken(ln *lane, l *queue.Leased, asked int64) *flight {
	d.m.takes.WithLabelValues(ln.name, takeMessage).Inc()
	d.noteBusy()
	m := l.Message
	ready := m.CreatedAt
	if m.NotBefore.After(ready) {
		ready = m.NotBefore
	}
	f := &flight{l: l, lane: ln, ready: ready}
	f.confirmed.Store(asked)
	d.track(f)
	d.log.Debug("taken", "id", m.ID, "class", m.Class.String(), "to", sms.MaskPhone(m.To), "attempts", m.Attempts)
	return f
}

// Step 2: a message past its TTL is completed as expired and never sent.
// It runs after take and again just before the send.
func (d *Dispatcher) expireCheck(f *flight) bool {
	m := f.l.Message
	if !m.Expired(d.cfg.Now()) {
		return false
	}
	d.log.Info("expired before send", "id", m.ID, "class", m.Class.String(), "expires_at", m.ExpiresAt)
	d.complete(f, queue.Outcome{Status: sms.StatusExpired, Reason: "ttl passed before send", Attempts: m.Attempts}, outcomeExpired)
	return true
}

// Step 2b: a message inside its recipient's quiet hours goes back until
// they end, before it is reserved: it spends no attempt and no rate. One
// whose TTL ends first is expired now rather than in the morning. The
// accept path already holds a message that arrives during quiet hours;
// this catches one accepted before they began and taken after.
func (d *Dispatcher) holdCheck(f *flight) bool {
	if d.cfg.Hold == nil {
		return false
	}
	m := f.l.Message
	now := d.cfg.Now()
	until := d.cfg.Hold(m, now)
	if until.IsZero() {
		return false
	}
	if m.Expired(until) {
		d.log.Info("expires during the recipient's quiet hours", "id", m.ID, "class", m.Class.String(), "expires_at", m.ExpiresAt)
		d.complete(f, queue.Outcome{Status: sms.StatusExpired, Reason: "ttl ends during the recipient's quiet hours", Attempts: m.Attempts}, outcomeExpired)
		return true
	}
	d.log.Debug("quiet hours: put back", "id", m.ID, "class", m.Class.String(), "until", until)
	d.requeue(f, until.Sub(now), false, requeueQuiet, "")
	return true
}

// Step 2c: a message with a receipt parked on it reached the provider on
// an earlier attempt whose outcome was unknown (the receipt came after):
// it is completed as sent, which stores the receipt's status, and never
// sent again. It spends no rate.
func (d *Dispatcher) receivedCheck(f *flight) bool {
	if f.l.Receipt == "" {
		return false
	}
	m := f.l.Message
	d.log.Info("a receipt came for an earlier attempt: stored as sent, not sent again", "id", m.ID, "class", m.Class.String(),
		"receipt", string(f.l.Receipt), "attempts", m.Attempts)
	d.complete(f, queue.Outcome{Status: sms.StatusSent, ProviderID: m.ProviderID, Attempts: m.Attempts}, outcomeSent)
	return true
}

// gone reports whether f was ended or put back before reserving: already
// at the provider (a receipt came), expired, or held for quiet hours.
func (d *Dispatcher) gone(f *flight) bool {
	return d.receivedCheck(f) || d.expireCheck(f) || d.holdCheck(f)
}

// cost is the message's units of provider rate.
func (d *Dispatcher) cost(m *sms.Message) int {
	if d.cfg.CountSegments {
		return max(m.Segments, 1)
	}
	return 1
}

// maxWait is how far ahead a message of this class may reserve.
func (d *Dispatcher) maxWait(m *sms.Message) time.Duration {
	if m.Class != sms.ClassOTP {
		return d.cfg.BulkMaxWait
	}
	w := d.cfg.OTPMaxWait
	if !m.ExpiresAt.IsZero() {
		w = min(w, m.ExpiresAt.Sub(d.cfg.Now()))
	}
	return max(w, 0)
}

// Results of reserve.
type reserveResult int

const (
	reserveOK    reserveResult = iota // every message of the batch has a slot at the returned delay
	reserveGone                       // every message was ended or put back
	reserveSplit                      // the batch costs more than the burst: reserve its messages one by one
)

// Step 3: reserve a limiter slot for a batch (one class; usually one
// message). A denial whose RetryAfter the lane can hold for is slept here,
// exactly; a longer one requeues the messages without spending an attempt
// and keeps the lane off their class until the slot could be granted.
//
// A batch held through an operator pause (denied Paused, then granted) is
// not sent on that grant when takes read the suppression list: the pause
// may have lasted hours, and the numbers may have been suppressed
// meanwhile. It goes back to its place in line and is taken again at once
// (the take reads the list); the slot is forfeited, once per pause. So is
// one that comes out of the pause too big for the burst, instead of being
// split and reserved message by message.
func (d *Dispatcher) reserve(ctx context.Context, batch []*flight) (slot, reserveResult) {
	m := batch[0].l.Message
	cls := m.Class.String()
	heldPaused := false
	for {
		cost := 0
		for _, f := range batch {
			cost += d.cost(f.l.Message)
		}
		asked := time.Now()
		dec, err := d.reserveSlot(ctx, m.Class, cost, len(batch), d.maxWait(m))
		switch {
		case errors.Is(err, limiter.ErrCostExceedsBurst) && len(batch) > 1:
			d.lowerBatchCap(m.Class, cost-1)
			if heldPaused && d.suppression.Covers(m.Class) {
				// Split, its messages would be reserved and sent one by
				// one without the list read again: taken again instead.
				d.putBackAll(batch)
				return slot{}, reserveGone
			}
			return slot{}, reserveSplit
		case errors.Is(err, limiter.ErrCostExceedsBurst) && d.grantable(m.Class, cost):
			d.log.Debug("cost exceeds the fallback burst; message put back until Redis is back", "id", m.ID, "class", cls, "cost", cost)
			d.requeueAll(batch, fallbackBurstWait, requeueRateWait)
			return slot{}, reserveGone
		case errors.Is(err, limiter.ErrCostExceedsBurst):
			d.log.Error("message can never be sent: its cost exceeds the limiter's burst", "id", m.ID, "class", cls, "cost", cost)
			d.complete(batch[0], queue.Outcome{Status: sms.StatusFailed, Attempts: m.Attempts,
				Reason: fmt.Sprintf("cost of %d segments exceeds the rate limiter's burst; it can never be sent", cost)}, outcomeFailed)
			return slot{}, reserveGone
		case err != nil:
			if ctx.Err() == nil {
				d.m.loopErrors.WithLabelValues("reserve").Inc()
				d.log.Warn("reserve failed; messages put back", "class", cls, "count", len(batch), "err", err)
				batch[0].lane.block(m.Class, time.Now().Add(takeErrorBackoffMin))
			}
			d.requeueAll(batch, 0, requeueReleased)
			return slot{}, reserveGone
		case dec.Allowed && heldPaused && d.suppression.Covers(m.Class):
			d.putBackAll(batch)
			return slot{}, reserveGone
		case dec.Allowed:
			return d.slotOf(asked, dec.Delay), reserveOK
		}
		ln := batch[0].lane
		now := time.Now()
		reason := requeueRateWait
		if dec.Paused {
			heldPaused = true
			reason = requeuePaused
			for _, c := range ln.classes {
				ln.block(c, now.Add(dec.RetryAfter))
			}
		}
		if dec.RetryAfter > d.cfg.HoldMax {
			ln.block(m.Class, now.Add(dec.RetryAfter))
			d.log.Debug("slot too far ahead; messages put back", "class", cls, "count", len(batch), "retry_after", dec.RetryAfter, "paused", dec.Paused)
			d.requeueAll(batch, dec.RetryAfter, reason)
			return slot{}, reserveGone
		}
		if !sleepCtx(ctx, dec.RetryAfter) {
			d.requeueAll(batch, 0, requeueReleased)
			return slot{}, reserveGone
		}
		live := batch[:0]
		for _, f := range batch {
			if !d.expireCheck(f) {
				live = append(live, f)
			}
		}
		if batch = live; len(batch) == 0 {
			return slot{}, reserveGone
		}
	}
}

// slot is a granted reservation: sleep delay from when the grant arrived
// (never earlier than the slot), and start the send by latest, or not at
// all (Config.LateSlot).
type slot struct {
	delay  time.Duration
	latest time.Time // zero: no bound
}

// slotOf is the slot of a grant of delay to a reservation asked at asked.
// The slot's time on our clock is at least asked+delay (Redis decided
// after we asked), so latest counts from there: an overestimate of how
// late a send is, never an underestimate.
func (d *Dispatcher) slotOf(asked time.Time, delay time.Duration) slot {
	sl := slot{delay: delay}
	if d.cfg.LateSlot > 0 {
		sl.latest = asked.Add(delay + d.cfg.LateSlot)
	}
	return sl
}

// late reports whether a send of sl would start too late; it counts the
// forfeited slot.
func (d *Dispatcher) late(sl slot, class sms.Class) bool {
	if sl.latest.IsZero() || !time.Now().After(sl.latest) {
		return false
	}
	d.m.lateSlots.WithLabelValues(class.String()).Inc()
	return true
}

// requeueAll puts a batch back without spending an attempt.
func (d *Dispatcher) requeueAll(batch []*flight, after time.Duration, reason string) {
	for _, f := range batch {
		d.requeue(f, after, false, reason, "")
	}
}

// lowerBatchCap records that a batch of more than c units does not fit the
// limiter's burst for class.
func (d *Dispatcher) lowerBatchCap(class sms.Class, c int) {
	d.batchCap.lower(classIndex(class), c, d.cfg.LearnedCapTTL)
}

// learnedCaps are caps learned per class from the limiter's
// ErrCostExceedsBurst, each forgotten ttl after it was last learned: a
// burst that was smaller for a while (the Redis-down fallback's) must not
// keep batches and slowed costs small once the full burst is back.
type learnedCaps struct {
	mu    sync.Mutex
	cap   [sms.ClassMarketing + 1]int
	until [sms.ClassMarketing + 1]time.Time // monotonic
}

// get is class i's cap, or 0 when none is known.
func (l *learnedCaps) get(i int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cap[i] > 0 && !time.Now().Before(l.until[i]) {
		l.cap[i] = 0
	}
	return l.cap[i]
}

// lower records that nothing above c (at least 1) fits for class i: the
// cap becomes c unless a smaller one is known, and is kept for ttl.
func (l *learnedCaps) lower(i, c int, ttl time.Duration) {
	c = max(c, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur := l.cap[i]; cur > 0 && cur < c && time.Now().Before(l.until[i]) {
		return
	}
	l.cap[i], l.until[i] = c, time.Now().Add(ttl)
}

// reserveSlot is the reservation both paths make: it asks the limiter for
// the slot of n messages of class costing cost units in all, and counts the
// answer (smsgw_dispatch_reservations_total by result; the granted delay
// once per message). A paused answer also pauses this process, so that
// senders holding a slot granted earlier do not send into the pause. A
// batch too big for the burst is not counted: the pacer splits it and its
// messages are counted one by one.
func (d *Dispatcher) reserveSlot(ctx context.Context, class sms.Class, cost, n int, maxWait time.Duration) (limiter.Decision, error) {
	dec, err := d.reserveSlowed(ctx, class, cost, maxWait)
	cls := class.String()
	result := reserveGranted
	switch {
	case errors.Is(err, limiter.ErrCostExceedsBurst) && n > 1:
		return dec, err
	case errors.Is(err, limiter.ErrCostExceedsBurst):
		result = reserveTooBig
	case err != nil:
		result = reserveError
	case dec.Allowed:
		for range n {
			d.m.reserveDelay.WithLabelValues(cls).Observe(dec.Delay.Seconds())
		}
	case dec.Paused:
		result = reservePaused
		d.pauseLocal(dec.RetryAfter)
	default:
		result = reserveDenied
	}
	d.m.reservations.WithLabelValues(cls, result).Inc()
	return dec, err
}

// reserveSlowed asks the limiter for a slot of cost units. While the
// suspension guard is active a message costs GuardSlowdown times its cost,
// capped by the largest cost the limiter's burst accepts (learned from
// ErrCostExceedsBurst): at the default burst 5 every message of 1 or 2
// segments goes at half the rate, on every replica.
func (d *Dispatcher) reserveSlowed(ctx context.Context, class sms.Class, cost int, maxWait time.Duration) (limiter.Decision, error) {
	cls := class.String()
	want := cost * int(d.slowdown.Load())
	capIdx := classIndex(class)
	if c := d.costCap.get(capIdx); c > 0 {
		want = min(want, c)
	}
	want = max(want, cost)
	for {
		dec, err := d.cfg.Limiter.Reserve(ctx, limiter.Request{Class: cls, Cost: want, MaxWait: maxWait, Spare: spareFor(class), Hasty: class == sms.ClassOTP})
		if errors.Is(err, limiter.ErrCostExceedsBurst) && want > cost {
			want--
			d.costCap.lower(capIdx, want, d.cfg.LearnedCapTTL)
			continue
		}
		return dec, err
	}
}

// bulkSpare is how many units of the global key's burst a reservation
// of a class other than OTP leaves free (limiter.Request.Spare): a bulk
// batch may not book the global key so far ahead that an OTP arriving
// after it must wait for its slot. Measured: without it, the OTPs that
// arrived just after a bulk batch booked ahead waited up to 5 ms (the
// slowest 4 of 100 in a 3-replica campaign; docs/scale.md).
const bulkSpare = 1

// spareFor is the Spare of a reservation of class c.
func spareFor(c sms.Class) int {
	if c == sms.ClassOTP {
		return 0
	}
	return bulkSpare
}

// grantable tells whether the shared limiter can ever grant cost units of
// class: a refusal of such a cost came from the Redis-down fallback's
// smaller burst and ends when Redis answers again.
func (d *Dispatcher) grantable(class sms.Class, cost int) bool {
	return cost <= d.cfg.Pacing.MaxCost(class.String())
}

// classIndex indexes the per-class arrays of Dispatcher.
func classIndex(c sms.Class) int {
	if !c.Valid() {
		return 0
	}
	return int(c)
}

// sendOne is a sender: it owns f and one slot of its lane until it returns.
// A batch's leader opens gate once its send is answered; followers wait
// for it after the delay.
func (d *Dispatcher) sendOne(f *flight, sl slot, gate *batchGate, leader bool) {
	defer d.senders.Done()
	defer f.lane.release()
	if leader {
		defer gate.open()
	}
	var done func(error) // the breaker's, once a send is let through
	defer func() {
		if v := recover(); v != nil {
			d.crashed(f, v, done)
		}
	}()
	ctx := d.runCtx
	if !d.sleepDelay(ctx, sl.delay) {
		d.abandon(f, "stopped before send")
		return
	}
	if !leader {
		gate.wait(ctx)
	}
	if d.expireCheck(f) {
		return
	}
	m := f.l.Message
	if left := d.pauseLeft(); left > 0 {
		// A 429 arrived after this slot was granted: do not feed the
		// provider's suspension counter.
		d.requeue(f, left, false, requeuePaused, "")
		return
	}
	if f.lost.Load() {
		d.log.Warn("lease lost before send; not sending", "id", m.ID)
		d.untrack(f)
		return
	}
	if age, ok := d.leaseConfirmed(f); !ok {
		// Put back (or, while the queue stays unreachable, left to
		// expire and be recovered): never sent by two replicas.
		d.log.Warn("lease not confirmed by the queue lately; not sending", "id", m.ID, "class", m.Class.String(),
			"confirmed_ago", age.String(), "lease", d.cfg.Lease.String())
		d.requeue(f, 0, false, requeueUnconfirmed, "")
		return
	}
	if d.late(sl, m.Class) {
		// This process stalled past the slot: sending now could join
		// sends of later slots in one clump. The slot is forfeited.
		d.requeue(f, 0, false, requeueLate, "")
		d.Notify(m.Class) // it is ready again at once
		return
	}
	var after time.Duration
	var err error
	if done, after, err = d.breakerAllow(m); err != nil {
		d.requeue(f, after, false, requeueBreaker, "provider breaker open")
		return
	}
	now := d.cfg.Now()
	res, kind, err := d.send(ctx, m, validity(m, now), now.Sub(f.ready), d.stopping)
	done(err)
	// A throttle or refused credentials pause every replica before this
	// batch's followers go.
	pause := d.answered(ctx, kind, err, m)
	gate.open()
	d.outcome(f, res, err, kind, pause)
}

// leaseConfirmed reports how long ago the queue last confirmed f's
// lease, and whether that is recent enough to send: within two thirds of
// the lease (the heartbeat confirms it every third, so two heartbeats may
// fail). Beyond that the lease may run out during the send, on the queue's
// clock, while this replica cannot reach the queue but the others can
// (a network partition, or this process stalled): another replica's
// recoverer would then take the message and send it too, and a provider
// that ignores idempotency keys would deliver it twice.
func (d *Dispatcher) leaseConfirmed(f *flight) (time.Duration, bool) {
	age := time.Duration(d.sinceEpoch() - f.confirmed.Load())
	return age, age <= d.cfg.Lease*2/3
}

// stopping reports whether a stop or a crash is cutting this process's
// sends short.
func (d *Dispatcher) stopping() bool { return d.runCtx.Err() != nil }

// Step 4: sleep the reserved delay. False when the process is stopping hard.
func (d *Dispatcher) sleepDelay(ctx context.Context, delay time.Duration) bool {
	if delay <= 0 {
		return true
	}
	return sleepCtx(ctx, delay)
}

// Step 5: the provider's circuit breaker. When it refuses, after is when
// to try again; nothing was sent.
func (d *Dispatcher) breakerAllow(m *sms.Message) (done func(error), after time.Duration, err error) {
	done, err = d.breaker.Allow()
	if err == nil {
		return done, 0, nil
	}
	d.m.breakerRejects.Inc()
	after = 100 * time.Millisecond // half-open: one probe at a time
	if errors.Is(err, gobreaker.ErrOpenState) {
		after = d.cfg.BreakerOpen
	}
	d.log.Debug("breaker rejected send", "id", m.ID, "err", err)
	return nil, after, err
}

// Step 6: send through the provider, the message id as idempotency key,
// and classify the answer. validity is how long the provider may keep
// trying (0: no limit). waited is how long the message waited for this
// call since it was ready. cutShort reports whether this process cut the
// call short (a stop); nil on the fast path, whose call only its caller's
// deadline bounds.
func (d *Dispatcher) send(ctx context.Context, m *sms.Message, validity, waited time.Duration, cutShort func() bool) (provider.Result, outcomeKind, error) {
	if d.cfg.SendTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.cfg.SendTimeout)
		defer cancel()
	}
	d.m.queueToSend.WithLabelValues(m.Class.String()).Observe(max(waited, 0).Seconds())
	start := time.Now()
	res, err := d.cfg.Provider.Send(ctx, providerRequest(m, validity))
	// The provider's text may quote the number or the body; from here on
	// (last_error, dead letters, logs, the API's answers) it never does.
	err = provider.Scrubbed(err, m.Body)
	stopping := err != nil && cutShort != nil && cutShort()
	result := sendResult(err, stopping)
	d.m.sendDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
	d.log.Debug("sent", "id", m.ID, "class", m.Class.String(), "to", sms.MaskPhone(m.To), "result", result)
	return res, classify(err, stopping), err
}

// Step 8: the message's fate in the queue. Throttles and refused
// credentials spend no attempt: the provider did not take the message and
// it is not the message's fault.
func (d *Dispatcher) outcome(f *flight, res provider.Result, err error, kind outcomeKind, pause time.Duration) {
	m := f.l.Message
	attempts := m.Attempts + 1
	switch kind {
	case kindSent:
		d.complete(f, queue.Outcome{Status: sms.StatusSent, ProviderID: res.ProviderID, Attempts: attempts}, outcomeSent)
	case kindCanceled:
		// We cut the send short; the provider may have it. The next
		// attempt carries the same id.
		d.abandon(f, "send cut short by stop")
	case kindThrottled:
		d.requeue(f, pause, false, requeueThrottled, lastError(err))
	case kindAuth:
		d.requeue(f, pause, false, requeueAuth, lastError(err))
	case kindRejected:
		d.log.Info("permanent failure", "id", m.ID, "class", m.Class.String(), "to", sms.MaskPhone(m.To), "reason", sendResult(err, false), "err", err)
		d.complete(f, queue.Outcome{Status: sms.StatusFailed, Reason: lastError(err), Attempts: attempts}, outcomeFailed)
	case kindOptedOut:
		// The recipient told the provider to stop: final, never retried,
		// not a dead letter; answered has reported the number.
		d.complete(f, queue.Outcome{Status: sms.StatusSuppressed, Reason: optedOutReason + lastError(err), Attempts: attempts},
			outcomeSuppressed)
	case kindPartial:
		// Part of the text reached the provider and will be delivered (and
		// billed); sending it again would repeat those parts. Failed, with
		// what was accepted recorded, for the producer to decide.
		pe := provider.AsError(err)
		d.log.Warn("partly sent: not sent again", "id", m.ID, "class", m.Class.String(), "to", sms.MaskPhone(m.To),
			"accepted_parts", len(pe.Accepted), "err", err)
		d.complete(f, queue.Outcome{Status: sms.StatusFailed, ProviderID: strings.Join(pe.Accepted, " "),
			Reason: lastError(err), Attempts: attempts}, outcomeFailed)
	default: // kindTransient, kindUnknown
		d.retry(f, attempts, err)
	}
}

// retry handles a temporary failure: back off with full jitter under the
// same id, or move the message to the dead letters after MaxAttempts.
func (d *Dispatcher) retry(f *flight, attempts int, err error) {
	m := f.l.Message
	if attempts >= d.cfg.MaxAttempts {
		d.log.Warn("attempts exhausted; dead letter", "id", m.ID, "class", m.Class.String(), "attempts", attempts, "err", err)
		d.ack(f, "dead", outcomeDead, func(ctx context.Context) error {
			return d.cfg.Queue.Dead(ctx, f.l, lastError(err), attempts)
		})
		return
	}
	after := d.backoff(attempts)
	d.log.Info("temporary failure; retrying later", "id", m.ID, "class", m.Class.String(), "attempts", attempts, "after", after, "err", err)
	d.requeue(f, after, true, requeueRetry, lastError(err))
}

// backoff is full jitter: uniform in [0, min(BackoffMax, BackoffBase·2^(n-1))].
func (d *Dispatcher) backoff(attempt int) time.Duration {
	ceil := d.cfg.BackoffMax
	if shift := attempt - 1; shift < 32 {
		if b := d.cfg.BackoffBase << shift; b > 0 && b < ceil {
			ceil = b
		}
	}
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}

// optedOutReason starts a suppressed message's last error, so that it
// reads as what happened whatever the vendor's own text says.
const optedOutReason = "the recipient opted out at the provider: "

func lastError(err error) string {
	if pe := provider.AsError(err); pe != nil {
		return pe.Error()
	}
	return err.Error()
}

func (d *Dispatcher) complete(f *flight, o queue.Outcome, label string) {
	d.ack(f, "complete", label, func(ctx context.Context) error { return d.cfg.Queue.Complete(ctx, f.l, o) })
}

func (d *Dispatcher) requeue(f *flight, after time.Duration, spend bool, reason, lastErr string) {
	d.m.requeues.WithLabelValues(f.l.Message.Class.String(), reason).Inc()
	if after > 0 && f.lane != nil {
		f.lane.dueAt(time.Now().Add(after))
	}
	// A message handed back because this process stops wakes another
	// replica at once (a shared queue); any other requeue is taken again
	// by the lane that put it back.
	announce := after == 0 && reason == requeueReleased && d.takeCtx.Err() != nil
	d.ack(f, "requeue", outcomeRequeued, func(ctx context.Context) error {
		return d.cfg.Queue.Requeue(ctx, f.l, queue.RequeueOptions{After: after, SpendAttempt: spend, LastError: lastErr, Announce: announce})
	})
}

// putBackAll hands a batch held through a pause back to its place in line
// (putBack), to be taken again.
func (d *Dispatcher) putBackAll(batch []*flight) {
	for _, f := range batch {
		d.putBack(f, requeueAfterPause)
	}
}

// putBack hands f back to the place in line it was taken from
// (queue.RequeueOptions.KeepPlace), spending nothing: the lane takes it
// again at once.
func (d *Dispatcher) putBack(f *flight, reason string) {
	d.m.requeues.WithLabelValues(f.l.Message.Class.String(), reason).Inc()
	d.ack(f, "requeue", outcomeRequeued, func(ctx context.Context) error {
		return d.cfg.Queue.Requeue(ctx, f.l, queue.RequeueOptions{KeepPlace: true})
	})
}

// abandon puts f back without spending an attempt when Stop asked for it,
// and otherwise (a crash) leaves the lease to expire.
func (d *Dispatcher) abandon(f *flight, why string) {
	if d.runCtx.Err() != nil && d.releaseCtx.Load() == nil {
		d.log.Warn("lease abandoned; it will be recovered after it expires", "id", f.l.Message.ID, "why", why)
		d.untrack(f)
		return
	}
	d.requeue(f, 0, false, requeueReleased, "")
}

// ack ends f's lease with call. It uses the run context while it lives and
// the release context during a hard stop; after a crash it does nothing.
// A failing queue (Redis restarting) is retried until it answers, for as
// long as this process runs: giving up would let a recoverer hand a message
// already sent to another replica, which would send it again. Recoverers
// hold back for a lease after a queue error (see recoverer), so a live
// holder acks first once Redis is back.
func (d *Dispatcher) ack(f *flight, op, label string, call func(context.Context) error) {
	f.acking.Store(true)
	defer d.untrack(f)
	ctx := d.runCtx
	if ctx.Err() != nil {
		rc := d.releaseCtx.Load()
		if rc == nil {
			return
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(*rc, ackTimeout)
		defer cancel()
	}
	m := f.l.Message
	for backoff := ackRetryMin; ; backoff = min(2*backoff, ackRetryMax) {
		err := call(ctx)
		if err == nil {
			d.m.outcomes.WithLabelValues(m.Class.String(), label).Inc()
			return
		}
		d.m.loopErrors.WithLabelValues("ack").Inc()
		d.noteQueueError()
		if errors.Is(err, queue.ErrLeaseLost) {
			d.log.Warn("lease lost before "+op+"; another replica has the message", "id", m.ID, "class", m.Class.String())
			return
		}
		if !sleepCtx(ctx, backoff) {
			d.log.Error(op+" failed; the lease will expire and the message be recovered", "id", m.ID, "class", m.Class.String(), "err", err)
			return
		}
		d.log.Warn(op+" failed; retrying", "id", m.ID, "class", m.Class.String(), "after", backoff, "err", err)
	}
}

// Retry bounds of a failing ack.
const (
	ackRetryMin = 50 * time.Millisecond
	ackRetryMax = 250 * time.Millisecond
)

// sleepCtx sleeps d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// errSenderCrashed is what the breaker is told of a send that panicked.
var errSenderCrashed = errors.New("dispatch: the sender crashed")

// crashed handles a panic in the sender of f (v, recovered): the process
// lives on; the crash is counted on the message, which goes back to the
// queue after a backoff, or, at its PoisonAfter-th crash, becomes a dead
// letter marked poison so that it cannot crash every replica forever. The
// log has the stack but not the panic's value, which may quote the message.
func (d *Dispatcher) crashed(f *flight, v any, breakerDone func(error)) {
	d.m.senderPanics.Inc()
	if breakerDone != nil {
		breakerDone(errSenderCrashed)
	}
	m := f.l.Message
	crashes := m.Crashes + 1
	d.log.Error("sender crashed; recovered", "id", m.ID, "class", m.Class.String(), "crashes", crashes,
		"poison_after", d.cfg.PoisonAfter, "panic_type", fmt.Sprintf("%T", v), "stack", string(debug.Stack()))
	if f.acking.Load() {
		return // the lease was already being ended; nothing more to do
	}
	if crashes >= d.cfg.PoisonAfter {
		d.m.poison.Inc()
		reason := fmt.Sprintf("poison: sending it crashed the sender %d times", crashes)
		d.ack(f, "dead", outcomeDead, func(ctx context.Context) error {
			return d.cfg.Queue.Dead(ctx, f.l, reason, m.Attempts)
		})
		return
	}
	d.m.requeues.WithLabelValues(m.Class.String(), requeueCrashed).Inc()
	d.ack(f, "requeue", outcomeRequeued, func(ctx context.Context) error {
		return d.cfg.Queue.Requeue(ctx, f.l, queue.RequeueOptions{After: d.backoff(crashes), Crashed: true,
			LastError: "the sender crashed on this message"})
	})
}
