package dispatch

import (
	"context"
	"errors"
	"time"

	"github.com/sony/gobreaker/v2"

	"smsgw/internal/provider"
	"smsgw/internal/sms"
	"smsgw/internal/tick"
)

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
	if left := d.senderPauseLeft(m.From); left > 0 {
		// Its sender was throttled after this slot was granted: one 429
		// per sender and replica, not one per slot held.
		d.holdSender([]*flight{f}, left, requeueSenderPaused)
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

// sleepCtx sleeps d; false when ctx ended first (tick.Sleep).
func sleepCtx(ctx context.Context, d time.Duration) bool { return tick.Sleep(ctx, d) }
