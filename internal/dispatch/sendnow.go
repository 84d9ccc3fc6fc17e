package dispatch

// The OTP fast path: the steps of take.go, reserve.go, send.go and
// record.go without the queue.
//
//	pause check → reserve → sleep delay → pause check → breaker → send → answered → typed error
//
// reserveSlot, breakerAllow, send and answered are the queued path's own
// steps, so a provider answer has the same effects on every replica
// whichever path sent; only the message's fate differs: nothing is queued,
// the caller gets the answer.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// SendNowResult is the answer of a synchronous OTP send.
type SendNowResult struct {
	ProviderID string
	// Waited is how long the message waited for its slot before the
	// provider call (limiter delay).
	Waited time.Duration
}

// NoSlotError means the message could not be sent within the deadline and
// was not: the limiter denied, every replica is paused, the provider
// throttled, or the provider refused our credentials (which pauses every
// replica for AuthPause). RetryAfter is when a slot may be free; the API
// answers 503 with it.
type NoSlotError struct {
	RetryAfter time.Duration
	Reason     string // "rate", "paused", "throttled" or "provider-auth"
}

// Reasons of a NoSlotError.
const (
	noSlotRate      = "rate"          // the limiter has no slot within the deadline
	noSlotPaused    = "paused"        // every replica is paused (an earlier throttle, an operator)
	noSlotThrottled = "throttled"     // the provider throttled or suspended this send
	noSlotAuth      = "provider-auth" // the provider refused our credentials or the account's settings
	noSlotFallback  = "rate-fallback" // Redis is down and the message costs more than this replica's fallback burst
)

// Paused reports that every replica was paused (a provider's throttle or
// an operator).
func (e NoSlotError) Paused() bool { return e.Reason == noSlotPaused }

func (e NoSlotError) Error() string {
	return fmt.Sprintf("dispatch: no send slot within the deadline (%s); retry after %s", e.Reason, e.RetryAfter)
}

var (
	// ErrOutcomeUnknown means the provider call timed out or its answer
	// could not be read: the provider may have the message. The API
	// answers 503; a retry by the caller with the same message id is
	// deduplicated by providers that honour the idempotency key.
	ErrOutcomeUnknown = errors.New("dispatch: provider outcome unknown")
	// ErrUnavailable means the provider is failing (breaker open, 5xx,
	// connection refused): the message was not accepted. The API answers 503.
	ErrUnavailable = errors.New("dispatch: provider unavailable")
)

// SendNow is the OTP fast path (POST /v1/otp): reserve a slot no further
// than deadline ahead, sleep to it and send synchronously with what is left
// of the deadline as the provider timeout. Nothing is queued.
//
// Errors: NoSlotError (denied, paused, throttled or credentials refused; a
// throttle or refused credentials also pause every replica), ErrOutcomeUnknown
// (timeout: the provider may have it), ErrUnavailable (the provider failed),
// a wrapped *provider.Error for a permanent rejection,
// limiter.ErrCostExceedsBurst.
func (d *Dispatcher) SendNow(ctx context.Context, m *sms.Message, deadline time.Duration) (SendNowResult, error) {
	if deadline <= 0 {
		deadline = defaultSendNowDeadline
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	d.noteBusy()
	steps := stepsFrom(ctx)
	start := time.Now()
	done, err := d.nowSlotAndBreaker(ctx, m, deadline, steps)
	if err != nil {
		return SendNowResult{}, err
	}
	waited := time.Since(start)
	// No validity: the fast path's deadline bounds our attempt, not how
	// long the provider may deliver what it accepted.
	res, kind, err := d.send(ctx, m, 0, waited, nil)
	steps.Mark(StepProvider)
	done(err)
	pause := d.answered(ctx, kind, err, m)
	if kind != kindSent {
		return SendNowResult{}, d.nowFailure(m, kind, pause, err)
	}
	d.m.sendNow.WithLabelValues(nowSent).Inc()
	if d.cfg.Replies != nil {
		sent := *m
		go d.sentTo(ctx, &sent) // off the OTP's path: its answer does not wait for the route
	}
	d.log.Debug("sent now", "id", m.ID, "to", sms.MaskPhone(m.To), "waited", waited)
	return SendNowResult{ProviderID: res.ProviderID, Waited: waited}, nil
}

// nowSlotAndBreaker reserves the fast path's slot, sleeps to it and passes
// the breaker; a send that would start later than Config.LateSlot after
// its slot (this process stalled) forfeits it and reserves once more.
func (d *Dispatcher) nowSlotAndBreaker(ctx context.Context, m *sms.Message, deadline time.Duration, steps *Steps) (func(error), error) {
	for try := 0; ; try++ {
		asked := time.Now()
		delay, err := d.nowSlot(ctx, m, deadline)
		steps.Mark(StepReserve)
		if err != nil {
			return nil, err
		}
		slept := sleepCtx(ctx, delay)
		steps.Mark(StepWait)
		if !slept {
			return nil, d.noSlot(noSlotRate, delay)
		}
		if left := max(d.pauseLeft(), d.senderPauseLeft(m.From)); left > 0 {
			// A throttle or refused credentials paused us (or the
			// sender) after this slot was granted.
			return nil, d.noSlot(noSlotPaused, left)
		}
		if d.late(d.slotOf(asked, delay), m.Class) {
			if try == 0 {
				continue
			}
			return nil, d.noSlot(noSlotRate, provider.MinRetryAfter)
		}
		done, _, err := d.breakerAllow(m)
		if err != nil {
			d.m.sendNow.WithLabelValues(nowUnavailable).Inc()
			return nil, fmt.Errorf("dispatch: send now %s: breaker: %w", m.ID, errors.Join(ErrUnavailable, err))
		}
		return done, nil
	}
}

// nowSlot reserves the fast path's slot: no further than deadline ahead,
// never into a pause. It returns the delay to sleep, or the error the API
// answers with.
func (d *Dispatcher) nowSlot(ctx context.Context, m *sms.Message, deadline time.Duration) (time.Duration, error) {
	if left := d.pauseLeft(); left > 0 {
		return 0, d.noSlot(noSlotPaused, left)
	}
	if d.cfg.Held != nil && (d.cfg.Held.ClassHeld(ctx, m.Class) || d.cfg.Held.ProducerHeld(ctx, m.Producer)) {
		return 0, d.noSlot(noSlotPaused, heldRetry)
	}
	cost := d.cost(m)
	dec, err := d.reserveSlot(ctx, m.Class, m.From, cost, 1, deadline)
	for err == nil && dec.SenderLimited && dec.RetryAfter < deadline {
		// The sender's key never books ahead: wait for its slot here,
		// within the deadline, and ask again.
		if !sleepCtx(ctx, dec.RetryAfter) {
			return 0, d.noSlot(noSlotRate, dec.RetryAfter)
		}
		deadline -= dec.RetryAfter
		dec, err = d.reserveSlot(ctx, m.Class, m.From, cost, 1, deadline)
	}
	switch {
	case errors.Is(err, limiter.ErrCostExceedsBurst) && d.grantable(m.Class, cost):
		return 0, d.noSlot(noSlotFallback, fallbackBurstWait)
	case errors.Is(err, limiter.ErrCostExceedsBurst):
		d.m.sendNow.WithLabelValues(nowFailed).Inc()
		return 0, fmt.Errorf("dispatch: send now %s: %d segments: %w", m.ID, cost, err)
	case err != nil:
		d.m.sendNow.WithLabelValues(nowNoSlot).Inc()
		return 0, fmt.Errorf("dispatch: send now %s: reserve: %w", m.ID, errors.Join(NoSlotError{RetryAfter: provider.MinRetryAfter, Reason: noSlotRate}, err))
	case dec.Allowed:
		return dec.Delay, nil
	case dec.Paused, dec.SenderPaused:
		return 0, d.noSlot(noSlotPaused, dec.RetryAfter)
	}
	return 0, d.noSlot(noSlotRate, dec.RetryAfter)
}

// noSlot counts and returns a NoSlotError.
func (d *Dispatcher) noSlot(reason string, after time.Duration) NoSlotError {
	d.m.sendNow.WithLabelValues(nowNoSlot).Inc()
	return NoSlotError{RetryAfter: after, Reason: reason}
}

// nowFailure is the fast path's fate of a send the provider did not take:
// the typed error the API answers with. answered has already paused every
// replica for a throttle or refused credentials; the caller is told to come
// back when that pause ends.
func (d *Dispatcher) nowFailure(m *sms.Message, kind outcomeKind, pause time.Duration, err error) error {
	var typed error
	switch kind {
	case kindThrottled:
		typed = d.noSlot(noSlotThrottled, max(pause, d.pauseLeft()))
	case kindAuth:
		typed = d.noSlot(noSlotAuth, max(pause, d.pauseLeft()))
	case kindRejected, kindPartial, kindOptedOut:
		// A partly accepted OTP is not retried either: the caller gets the
		// provider's refusal (part of it may still arrive).
		d.m.sendNow.WithLabelValues(nowFailed).Inc()
		return fmt.Errorf("dispatch: send now %s: %w", m.ID, err)
	case kindTransient:
		if pe := provider.AsError(err); pe != nil && pe.NotSent {
			d.m.sendNow.WithLabelValues(nowUnavailable).Inc()
			typed = ErrUnavailable
			break
		}
		// A 5xx or a connection lost after the request was written: the
		// queued path retries it under the same id, and so must the
		// caller, who is told the outcome is unknown (the API then keeps
		// the id under the request's Idempotency-Key).
		fallthrough
	default: // kindUnknown: timeout, unreadable answer, unclassified, deadline passed mid-call
		d.m.sendNow.WithLabelValues(nowUnknown).Inc()
		d.log.Warn("OTP fast path: outcome unknown", "id", m.ID, "to", sms.MaskPhone(m.To), "err", err)
		typed = ErrOutcomeUnknown
	}
	return fmt.Errorf("dispatch: send now %s: %w", m.ID, errors.Join(typed, err))
}
