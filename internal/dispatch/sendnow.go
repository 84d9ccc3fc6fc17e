package dispatch

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

// ErrNoSlot means no slot could be had within the deadline (the limiter
// denied, the account is paused, or the provider throttled): nothing was
// sent. RetryAfter is when a slot may be free; the API answers 503 with it.
type ErrNoSlot struct {
	RetryAfter time.Duration
	Reason     string // "rate", "paused" or "throttled"
}

func (e ErrNoSlot) Error() string {
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
// Errors: ErrNoSlot (denied, paused or throttled; a throttle also pauses
// every replica), ErrOutcomeUnknown (timeout: the provider may have it),
// ErrUnavailable (the provider failed), a wrapped *provider.Error for a
// permanent rejection, limiter.ErrCostExceedsBurst.
func (d *Dispatcher) SendNow(ctx context.Context, m *sms.Message, deadline time.Duration) (SendNowResult, error) {
	if deadline <= 0 {
		deadline = defaultSendNowDeadline
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	start := time.Now()
	cls := m.Class.String()

	if left := d.pauseLeft(); left > 0 {
		d.m.sendNow.WithLabelValues(nowNoSlot).Inc()
		return SendNowResult{}, ErrNoSlot{RetryAfter: left, Reason: "paused"}
	}
	cost := d.cost(m)
	dec, err := d.reserveSlot(ctx, m.Class, cost, deadline)
	switch {
	case errors.Is(err, limiter.ErrCostExceedsBurst):
		d.m.reservations.WithLabelValues(cls, reserveTooBig).Inc()
		d.m.sendNow.WithLabelValues(nowFailed).Inc()
		return SendNowResult{}, fmt.Errorf("dispatch: send now %s: %d segments: %w", m.ID, cost, err)
	case err != nil:
		d.m.reservations.WithLabelValues(cls, reserveError).Inc()
		d.m.sendNow.WithLabelValues(nowNoSlot).Inc()
		return SendNowResult{}, fmt.Errorf("dispatch: send now %s: reserve: %w", m.ID, errors.Join(ErrNoSlot{RetryAfter: provider.MinRetryAfter, Reason: "rate"}, err))
	case !dec.Allowed:
		reason := "rate"
		if dec.Paused {
			reason = "paused"
			d.pauseLocal(dec.RetryAfter)
			d.m.reservations.WithLabelValues(cls, reservePaused).Inc()
		} else {
			d.m.reservations.WithLabelValues(cls, reserveDenied).Inc()
		}
		d.m.sendNow.WithLabelValues(nowNoSlot).Inc()
		return SendNowResult{}, ErrNoSlot{RetryAfter: dec.RetryAfter, Reason: reason}
	}
	d.m.reservations.WithLabelValues(cls, reserveGranted).Inc()
	d.m.reserveDelay.WithLabelValues(cls).Observe(dec.Delay.Seconds())
	if !sleepCtx(ctx, dec.Delay) {
		d.m.sendNow.WithLabelValues(nowNoSlot).Inc()
		return SendNowResult{}, ErrNoSlot{RetryAfter: dec.Delay, Reason: "rate"}
	}
	if left := d.pauseLeft(); left > 0 {
		d.m.sendNow.WithLabelValues(nowNoSlot).Inc()
		return SendNowResult{}, ErrNoSlot{RetryAfter: left, Reason: "paused"}
	}
	done, err := d.breaker.Allow()
	if err != nil {
		d.m.breakerRejects.Inc()
		d.m.sendNow.WithLabelValues(nowUnavailable).Inc()
		return SendNowResult{}, fmt.Errorf("dispatch: send now %s: breaker: %w", m.ID, errors.Join(ErrUnavailable, err))
	}
	sendAt := time.Now()
	d.m.queueToSend.WithLabelValues(cls).Observe(sendAt.Sub(start).Seconds())
	res, err := d.cfg.Provider.Send(ctx, &provider.Request{ID: m.ID, To: m.To, From: m.From, Body: m.Body, Segments: m.Segments, Class: m.Class, AcceptedAt: m.CreatedAt})
	done(err)
	pe := provider.AsError(err)
	result := sendOK
	if err != nil {
		result = sendOther
		if pe != nil {
			result = string(pe.Reason)
		}
	}
	d.m.sendDuration.WithLabelValues(result).Observe(time.Since(sendAt).Seconds())
	waited := sendAt.Sub(start)
	switch {
	case err == nil:
		d.m.sendNow.WithLabelValues(nowSent).Inc()
		d.log.Debug("sent now", "id", m.ID, "to", sms.MaskPhone(m.To), "waited", waited)
		return SendNowResult{ProviderID: res.ProviderID, Waited: waited}, nil
	case pe != nil && (pe.Reason == provider.ReasonThrottled || pe.Reason == provider.ReasonSuspended):
		pause := provider.ClampRetryAfter(pe.RetryAfter) * time.Duration(d.slowdown.Load())
		d.pauseLocal(pause)
		// The caller's deadline may be spent; the pause must still land.
		pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
		defer pcancel()
		if perr := d.cfg.Limiter.Pause(pctx, pause); perr != nil {
			d.m.loopErrors.WithLabelValues("pause").Inc()
			d.log.Error("shared pause failed; pausing this process only", "pause", pause, "err", perr)
		}
		if pe.Reason == provider.ReasonThrottled {
			d.m.throttles.Inc()
			if d.cfg.Guard != nil {
				if n, gerr := d.cfg.Guard.Record429(pctx); gerr == nil {
					d.setGuardCount(n)
				}
			}
		}
		d.log.Warn("provider throttled the OTP fast path: every replica paused", "id", m.ID, "pause", pause)
		d.m.sendNow.WithLabelValues(nowNoSlot).Inc()
		return SendNowResult{}, ErrNoSlot{RetryAfter: pause, Reason: "throttled"}
	case pe != nil && !pe.Temporary:
		d.m.sendNow.WithLabelValues(nowFailed).Inc()
		return SendNowResult{}, fmt.Errorf("dispatch: send now %s: %w", m.ID, err)
	case pe != nil && (pe.Reason == provider.ReasonUnavailable || pe.Reason == provider.ReasonNetwork):
		d.m.sendNow.WithLabelValues(nowUnavailable).Inc()
		return SendNowResult{}, fmt.Errorf("dispatch: send now %s: %w", m.ID, errors.Join(ErrUnavailable, err))
	default: // timeout, unreadable answer, unclassified, deadline passed mid-call
		d.m.sendNow.WithLabelValues(nowUnknown).Inc()
		d.log.Warn("OTP fast path: outcome unknown", "id", m.ID, "to", sms.MaskPhone(m.To), "err", err)
		return SendNowResult{}, fmt.Errorf("dispatch: send now %s: %w", m.ID, errors.Join(ErrOutcomeUnknown, err))
	}
}
