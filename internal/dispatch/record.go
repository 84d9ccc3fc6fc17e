package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// ackTimeout bounds a queue call made after Stop's own bound has passed.
const ackTimeout = 2 * time.Second

// Step 8: the message's fate in the queue. Throttles and refused
// credentials spend no attempt: the provider did not take the message and
// it is not the message's fault.
func (d *Dispatcher) outcome(f *flight, res provider.Result, err error, kind outcomeKind, pause time.Duration) {
	m := f.l.Message
	attempts := m.Attempts + 1
	switch kind {
	case kindSent:
		d.complete(f, queue.Outcome{Status: sms.StatusSent, ProviderID: res.ProviderID, Attempts: attempts}, outcomeSent)
		d.sentTo(d.runCtx, m)
	case kindCanceled:
		// We cut the send short; the provider may have it. The next
		// attempt carries the same id.
		d.abandon(f, "send cut short by stop")
	case kindThrottled, kindAuth:
		reason := requeueThrottled
		switch {
		case senderScoped(provider.AsError(err)):
			// that sender's lane held for its pause, the message at its place
			d.holdSender([]*flight{f}, pause, requeueSenderPaused)
			return
		case kind == kindAuth:
			reason = requeueAuth
		}
		d.requeue(f, pause, false, reason, lastError(err))
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
