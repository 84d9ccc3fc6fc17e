package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"smsgw/internal/limiter"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// cost is the message's units of provider rate.
func (d *Dispatcher) cost(m *sms.Message) int { return m.Cost(d.cfg.CountSegments) }

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
		dec, err := d.reserveSlot(ctx, m.Class, m.From, cost, len(batch), d.maxWait(m))
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
		case dec.SenderPaused, dec.SenderLimited:
			// The sender's alone: its messages go back, due at its next
			// slot; the lane takes the next message at once.
			d.senderWait(batch, dec)
			return slot{}, reserveGone
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
// the slot of n messages of class from sender costing cost units in all, and counts the
// answer (smsgw_dispatch_reservations_total by result; the granted delay
// once per message). A paused answer also pauses this process, so that
// senders holding a slot granted earlier do not send into the pause. A
// batch too big for the burst is not counted: the pacer splits it and its
// messages are counted one by one.
func (d *Dispatcher) reserveSlot(ctx context.Context, class sms.Class, sender string, cost, n int, maxWait time.Duration) (limiter.Decision, error) {
	dec, err := d.reserveSlowed(ctx, class, sender, cost, maxWait)
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
func (d *Dispatcher) reserveSlowed(ctx context.Context, class sms.Class, sender string, cost int, maxWait time.Duration) (limiter.Decision, error) {
	cls := class.String()
	want := cost * int(d.slowdown.Load())
	capIdx := classIndex(class)
	if c := d.costCap.get(capIdx); c > 0 {
		want = min(want, c)
	}
	want = max(want, cost)
	for {
		dec, err := d.cfg.Limiter.Reserve(ctx, limiter.Request{Class: cls, Cost: want, MaxWait: maxWait, Spare: spareFor(class), Hasty: class == sms.ClassOTP,
			Sender: sender})
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
