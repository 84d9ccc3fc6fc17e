package dispatch

// The send path, one named step per function, in the order a message meets
// them:
//
//	take → expire check → reserve → sleep delay → breaker → send → outcome
//
// take, expire check and reserve run in the lane's pacer; the rest in a
// sender goroutine. Each step logs and counts what it decides.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
func (d *Dispatcher) take(ctx context.Context, ln *lane, classes []sms.Class) (*flight, time.Duration, error) {
	l, wait, err := d.cfg.Queue.Take(ctx, queue.TakeOptions{Owner: d.cfg.Owner + "/" + ln.name, Lease: d.cfg.Lease, Classes: classes})
	switch {
	case errors.Is(err, queue.ErrEmpty):
		d.m.takes.WithLabelValues(ln.name, takeEmpty).Inc()
		return nil, wait, err
	case err != nil:
		d.m.takes.WithLabelValues(ln.name, takeError).Inc()
		if ctx.Err() == nil {
			d.noteQueueError()
			d.m.loopErrors.WithLabelValues("take").Inc()
			d.log.Warn("take failed", "lane", ln.name, "err", err)
		}
		return nil, 0, fmt.Errorf("dispatch: take: %w", err)
	}
	d.m.takes.WithLabelValues(ln.name, takeMessage).Inc()
	m := l.Message
	ready := m.CreatedAt
	if m.NotBefore.After(ready) {
		ready = m.NotBefore
	}
	f := &flight{l: l, lane: ln, ready: ready}
	d.track(f)
	d.log.Debug("taken", "id", m.ID, "class", m.Class.String(), "to", sms.MaskPhone(m.To), "attempts", m.Attempts)
	return f, 0, nil
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
func (d *Dispatcher) reserve(ctx context.Context, batch []*flight) (time.Duration, reserveResult) {
	m := batch[0].l.Message
	cls := m.Class.String()
	for {
		cost := 0
		for _, f := range batch {
			cost += d.cost(f.l.Message)
		}
		dec, err := d.reserveSlot(ctx, m.Class, cost, d.maxWait(m))
		switch {
		case errors.Is(err, limiter.ErrCostExceedsBurst) && len(batch) > 1:
			d.lowerBatchCap(m.Class, cost-1)
			return 0, reserveSplit
		case errors.Is(err, limiter.ErrCostExceedsBurst):
			d.m.reservations.WithLabelValues(cls, reserveTooBig).Inc()
			d.log.Error("message can never be sent: its cost exceeds the limiter's burst", "id", m.ID, "class", cls, "cost", cost)
			d.complete(batch[0], queue.Outcome{Status: sms.StatusFailed, Attempts: m.Attempts,
				Reason: fmt.Sprintf("cost of %d segments exceeds the rate limiter's burst; it can never be sent", cost)}, outcomeFailed)
			return 0, reserveGone
		case err != nil:
			d.m.reservations.WithLabelValues(cls, reserveError).Inc()
			if ctx.Err() == nil {
				d.m.loopErrors.WithLabelValues("reserve").Inc()
				d.log.Warn("reserve failed; messages put back", "class", cls, "count", len(batch), "err", err)
				batch[0].lane.block(m.Class, time.Now().Add(takeErrorBackoffMin))
			}
			d.requeueAll(batch, 0, requeueReleased)
			return 0, reserveGone
		case dec.Allowed:
			d.m.reservations.WithLabelValues(cls, reserveGranted).Inc()
			for range batch {
				d.m.reserveDelay.WithLabelValues(cls).Observe(dec.Delay.Seconds())
			}
			return dec.Delay, reserveOK
		}
		ln := batch[0].lane
		now := time.Now()
		reason := requeueRateWait
		if dec.Paused {
			reason = requeuePaused
			d.m.reservations.WithLabelValues(cls, reservePaused).Inc()
			d.pauseLocal(dec.RetryAfter)
			for _, c := range ln.classes {
				ln.block(c, now.Add(dec.RetryAfter))
			}
		} else {
			d.m.reservations.WithLabelValues(cls, reserveDenied).Inc()
		}
		if dec.RetryAfter > d.cfg.HoldMax {
			ln.block(m.Class, now.Add(dec.RetryAfter))
			d.log.Debug("slot too far ahead; messages put back", "class", cls, "count", len(batch), "retry_after", dec.RetryAfter, "paused", dec.Paused)
			d.requeueAll(batch, dec.RetryAfter, reason)
			return 0, reserveGone
		}
		if !sleepCtx(ctx, dec.RetryAfter) {
			d.requeueAll(batch, 0, requeueReleased)
			return 0, reserveGone
		}
		live := batch[:0]
		for _, f := range batch {
			if !d.expireCheck(f) {
				live = append(live, f)
			}
		}
		if batch = live; len(batch) == 0 {
			return 0, reserveGone
		}
	}
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
	c = max(c, 1)
	for {
		cur := d.batchCap[classIndex(class)].Load()
		if cur > 0 && cur <= int64(c) || d.batchCap[classIndex(class)].CompareAndSwap(cur, int64(c)) {
			return
		}
	}
}

// reserveSlot asks the limiter for one message's slot. While the
// suspension guard is active a message costs GuardSlowdown times its cost,
// capped by the largest cost the limiter's burst accepts (learned from
// ErrCostExceedsBurst): at the default burst 5 every message of 1 or 2
// segments goes at half the rate, on every replica.
func (d *Dispatcher) reserveSlot(ctx context.Context, class sms.Class, cost int, maxWait time.Duration) (limiter.Decision, error) {
	cls := class.String()
	want := cost * int(d.slowdown.Load())
	capIdx := classIndex(class)
	if c := d.costCap[capIdx].Load(); c > 0 {
		want = min(want, int(c))
	}
	want = max(want, cost)
	for {
		dec, err := d.cfg.Limiter.Reserve(ctx, limiter.Request{Class: cls, Cost: want, MaxWait: maxWait})
		if errors.Is(err, limiter.ErrCostExceedsBurst) && want > cost {
			want--
			d.costCap[capIdx].Store(int64(want))
			continue
		}
		return dec, err
	}
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
func (d *Dispatcher) sendOne(f *flight, delay time.Duration, gate *batchGate, leader bool) {
	defer d.senders.Done()
	defer f.lane.release()
	if leader {
		defer gate.open()
	}
	ctx := d.runCtx
	if !d.sleepDelay(ctx, f, delay) {
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
	done, ok := d.breakerAllow(f)
	if !ok {
		return
	}
	res, err := d.send(ctx, f)
	done(err)
	if pe := provider.AsError(err); pe != nil && (pe.Reason == provider.ReasonThrottled || pe.Reason == provider.ReasonSuspended) {
		// Stop this process's followers before anything else.
		d.pauseLocal(provider.ClampRetryAfter(pe.RetryAfter))
	}
	gate.open()
	d.outcome(f, res, err)
}

// Step 4: sleep the reserved delay. False when the process is stopping hard.
func (d *Dispatcher) sleepDelay(ctx context.Context, f *flight, delay time.Duration) bool {
	if delay <= 0 {
		return true
	}
	return sleepCtx(ctx, delay)
}

// Step 5: the provider's circuit breaker. An open breaker puts the message
// back without spending an attempt.
func (d *Dispatcher) breakerAllow(f *flight) (func(error), bool) {
	done, err := d.breaker.Allow()
	if err == nil {
		return done, true
	}
	d.m.breakerRejects.Inc()
	after := 100 * time.Millisecond // half-open: one probe at a time
	if errors.Is(err, gobreaker.ErrOpenState) {
		after = d.cfg.BreakerOpen
	}
	d.log.Debug("breaker rejected send", "id", f.l.Message.ID, "err", err)
	d.requeue(f, after, false, requeueBreaker, "provider breaker open")
	return nil, false
}

// Step 6: send through the provider, the message id as idempotency key.
func (d *Dispatcher) send(ctx context.Context, f *flight) (provider.Result, error) {
	m := f.l.Message
	if d.cfg.SendTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.cfg.SendTimeout)
		defer cancel()
	}
	start := time.Now()
	d.m.queueToSend.WithLabelValues(m.Class.String()).Observe(max(d.cfg.Now().Sub(f.ready), 0).Seconds())
	res, err := d.cfg.Provider.Send(ctx, &provider.Request{ID: m.ID, To: m.To, From: m.From, Body: m.Body, Segments: m.Segments, Class: m.Class, AcceptedAt: m.CreatedAt})
	result := sendOK
	switch pe := provider.AsError(err); {
	case err == nil:
	case d.runCtx.Err() != nil:
		result = sendCanceled
	case pe != nil:
		result = string(pe.Reason)
	default:
		result = sendOther
	}
	d.m.sendDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
	d.log.Debug("sent", "id", m.ID, "class", m.Class.String(), "to", sms.MaskPhone(m.To), "result", result)
	return res, err
}

// Step 7: act on the provider's answer.
func (d *Dispatcher) outcome(f *flight, res provider.Result, err error) {
	m := f.l.Message
	attempts := m.Attempts + 1
	pe := provider.AsError(err)
	switch {
	case err == nil:
		d.complete(f, queue.Outcome{Status: sms.StatusSent, ProviderID: res.ProviderID, Attempts: attempts}, outcomeSent)
	case d.runCtx.Err() != nil:
		// We cut the send short; the provider may have it. The next
		// attempt carries the same id.
		d.abandon(f, "send cut short by stop")
	case pe != nil && (pe.Reason == provider.ReasonThrottled || pe.Reason == provider.ReasonSuspended):
		d.throttled(f, pe)
	case pe != nil && pe.Reason == provider.ReasonAuth:
		d.authFailed(f, pe)
	case pe != nil && !pe.Temporary:
		d.log.Info("permanent failure", "id", m.ID, "class", m.Class.String(), "to", sms.MaskPhone(m.To), "reason", string(pe.Reason), "err", err)
		d.complete(f, queue.Outcome{Status: sms.StatusFailed, Reason: pe.Error(), Attempts: attempts}, outcomeFailed)
	default:
		d.retry(f, attempts, err)
	}
}

// throttled handles a 429 or a suspension: pause every replica for the
// provider's Retry-After (longer while the guard is active) and put the
// message back without spending an attempt. Never retried in place.
func (d *Dispatcher) throttled(f *flight, pe *provider.Error) {
	m := f.l.Message
	pause := provider.ClampRetryAfter(pe.RetryAfter) * time.Duration(d.slowdown.Load())
	d.pauseLocal(pause)
	if err := d.cfg.Limiter.Pause(d.runCtx, pause); err != nil {
		d.m.loopErrors.WithLabelValues("pause").Inc()
		d.log.Error("shared pause failed; pausing this process only", "pause", pause, "err", err)
	}
	if pe.Reason == provider.ReasonThrottled {
		d.m.throttles.Inc()
		d.record429()
	}
	d.log.Warn("provider throttled: every replica paused", "id", m.ID, "class", m.Class.String(), "reason", string(pe.Reason), "pause", pause)
	d.requeue(f, pause, false, requeueThrottled, pe.Error())
}

// AuthPause is how long every replica stops sending after the provider
// refused the account's credentials.
const AuthPause = time.Minute

// authFailed handles a provider that refuses our credentials (401/403). That
// is not the message's fault: failing it would empty the whole queue into
// failures within seconds of a rotated token. Every replica pauses for
// AuthPause and the message goes back without spending an attempt, so
// nothing is lost while an operator fixes the credentials; the error log
// and smsgw_dispatch_requeues_total{reason="auth"} say why nothing is sent.
func (d *Dispatcher) authFailed(f *flight, pe *provider.Error) {
	m := f.l.Message
	d.pauseLocal(AuthPause)
	if err := d.cfg.Limiter.Pause(d.runCtx, AuthPause); err != nil {
		d.m.loopErrors.WithLabelValues("pause").Inc()
		d.log.Error("shared pause failed; pausing this process only", "pause", AuthPause, "err", err)
	}
	d.log.Error("provider refused the account's credentials: every replica paused; fix provider credentials",
		"id", m.ID, "class", m.Class.String(), "pause", AuthPause, "err", pe.Error())
	d.requeue(f, AuthPause, false, requeueAuth, pe.Error())
}

func (d *Dispatcher) record429() {
	if d.cfg.Guard == nil {
		return
	}
	n, err := d.cfg.Guard.Record429(d.runCtx)
	if err != nil {
		d.m.loopErrors.WithLabelValues("guard").Inc()
		d.log.Warn("suspension guard: record 429 failed", "err", err)
		return
	}
	d.setGuardCount(n)
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
	d.ack(f, "requeue", outcomeRequeued, func(ctx context.Context) error {
		return d.cfg.Queue.Requeue(ctx, f.l, queue.RequeueOptions{After: after, SpendAttempt: spend, LastError: lastErr})
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
