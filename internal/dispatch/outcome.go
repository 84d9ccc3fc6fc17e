package dispatch

// What a provider's answer means, decided in one place for both send
// paths. The queued path (take.go to record.go) and the OTP fast path
// (sendnow.go) classify every answer with classify and apply what it means for every
// replica with answered; they differ only in the message's fate: the queued
// path completes, requeues, retries or dead-letters it, the fast path
// returns a typed error and queues nothing.

import (
	"context"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// outcomeKind is the closed set of provider answers as the send paths see
// them.
type outcomeKind int

const (
	kindSent      outcomeKind = iota // the provider took the message
	kindThrottled                    // 429, suspension, vendor queue full: not taken; every replica pauses for the Retry-After (the sender's scope: that sender only)
	kindAuth                         // our credentials or the account's settings refused: not the message's fault; every replica pauses for AuthPause
	kindTransient                    // 5xx, network: the provider did not take it
	kindUnknown                      // timeout, unreadable 2xx, unclassified: the provider may have it
	kindRejected                     // permanent rejection of this message
	kindOptedOut                     // permanent: the recipient opted out at the provider; suppressed, and the number reported (OptOuts)
	kindPartial                      // some parts taken, not all: failed, never sent again; the refused part's pause applies
	kindCanceled                     // this process stopped mid-send: the provider may have it
)

// classify tells what err, the answer of one provider call, means.
// stopping: this process cut the call short (a hard stop).
func classify(err error, stopping bool) outcomeKind {
	if err == nil {
		return kindSent
	}
	if stopping {
		return kindCanceled
	}
	pe := provider.AsError(err)
	switch {
	case pe == nil:
		return kindUnknown
	case pausing(pe.Reason):
		return kindThrottled
	case pe.Reason == provider.ReasonAuth, pe.Reason == provider.ReasonSetup:
		return kindAuth
	case pe.Reason == provider.ReasonPartial:
		return kindPartial
	case pe.Reason == provider.ReasonOptedOut:
		return kindOptedOut
	case !pe.Temporary:
		return kindRejected
	case pe.Reason == provider.ReasonUnavailable, pe.Reason == provider.ReasonNetwork:
		return kindTransient
	}
	return kindUnknown
}

// pausing reports whether an answer of reason r pauses every replica for
// its Retry-After: the provider did not take the message and will not take
// the next one sooner.
func pausing(r provider.Reason) bool {
	return r == provider.ReasonThrottled || r == provider.ReasonSuspended || r == provider.ReasonQueueFull
}

// sendResult is the result label of smsgw_dispatch_send_duration_seconds:
// "ok", "canceled", the provider's reason, or "other".
func sendResult(err error, stopping bool) string {
	pe := provider.AsError(err)
	switch {
	case err == nil:
		return sendOK
	case stopping:
		return sendCanceled
	case pe != nil:
		return string(pe.Reason)
	}
	return sendOther
}

// providerRequest is the provider call for m: its id is the idempotency key,
// the same on every attempt and on both paths. validity is how long the
// provider may keep trying (0: no limit).
func providerRequest(m *sms.Message, validity time.Duration) *provider.Request {
	return &provider.Request{ID: m.ID, To: m.To, From: m.From, Body: m.Body, Segments: m.Segments,
		Class: m.Class, AcceptedAt: m.CreatedAt, Validity: validity}
}

// validity is what is left of m's TTL at now, for the provider (0: none).
// The expiry check has just run, so it is positive; at least a millisecond
// so that it never reads as "no limit".
func validity(m *sms.Message, now time.Time) time.Duration {
	if m.ExpiresAt.IsZero() {
		return 0
	}
	return max(m.ExpiresAt.Sub(now), time.Millisecond)
}

// AuthPause is how long every replica stops sending after the provider
// refused the account's credentials.
const AuthPause = time.Minute

// Step 7: what the answer means for every replica. A throttle or refused
// credentials pause this process and, through the limiter, every replica;
// a 429 is recorded by the suspension guard. An answer of the sender's
// scope pauses that sender alone (senderAnswered). It returns the pause (0: none).
// The pause must land even when the caller's deadline is spent or a stop
// is cutting sends short, so it gets a context of its own.
//
// An opt-out (the recipient told the provider to stop) is reported to
// OptOuts, so the number is refused at accept from then on, on every
// replica, instead of spending a slot of the contract on each later
// message the provider would refuse the same way.
func (d *Dispatcher) answered(ctx context.Context, kind outcomeKind, err error, m *sms.Message) time.Duration {
	pe := provider.AsError(err)
	if kind == kindPartial {
		// The refused part decides what it means for everyone.
		kind = classify(&provider.Error{Reason: pe.PartReason, Temporary: true}, false)
	}
	if kind != kindThrottled && kind != kindAuth && kind != kindOptedOut {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	if kind == kindOptedOut {
		d.optedOut(ctx, pe, m)
		return 0
	}
	if senderScoped(pe) {
		// The sender's limit, queue or setup: that sender pauses, not
		// the account (senders.go).
		return d.senderAnswered(ctx, pe, m.From, m)
	}
	if kind == kindAuth {
		return d.authFailed(ctx, pe, m)
	}
	return d.throttled(ctx, pe, m)
}

// throttled handles a 429 or a suspension: every replica pauses for the
// provider's Retry-After, GuardSlowdown times longer while the guard is
// active. Never retried in place.
func (d *Dispatcher) throttled(ctx context.Context, pe *provider.Error, m *sms.Message) time.Duration {
	// The guard's slowdown lengthens the pause, never beyond the cap a
	// vendor's own Retry-After gets.
	pause := min(provider.ClampRetryAfter(pe.RetryAfter)*time.Duration(d.slowdown.Load()), provider.MaxRetryAfter)
	d.pauseEveryone(ctx, pause)
	if pe.Reason == provider.ReasonThrottled || pe.PartReason == provider.ReasonThrottled {
		d.m.throttles.Inc()
		d.record429(ctx)
	}
	d.log.Warn("provider throttled: every replica paused", "id", m.ID, "class", m.Class.String(),
		"reason", string(pe.Reason), "pause", pause)
	return pause
}

// authFailed handles a provider that refuses our credentials (401/403) or
// the account's own settings (its default sender, its account id): every
// message would fail the same way, and none of it is the message's fault.
// Failing them would empty the whole queue into failures within seconds of
// a rotated token or a released number. Every replica pauses for
// AuthPause, so nothing is sent (or lost) while an operator fixes the
// configuration; the error log says which.
func (d *Dispatcher) authFailed(ctx context.Context, pe *provider.Error, m *sms.Message) time.Duration {
	d.pauseEveryone(ctx, AuthPause)
	what := "provider refused the account's credentials: every replica paused; fix provider credentials"
	if pe.Reason == provider.ReasonSetup || pe.PartReason == provider.ReasonSetup {
		what = "provider refused the account's settings (sender or account id): every replica paused; fix the provider settings"
	}
	d.log.Error(what, "id", m.ID, "class", m.Class.String(), "pause", AuthPause, "err", pe.Error())
	return AuthPause
}

// OptOuts is where the send loop reports a recipient whom the provider
// says opted out. The suppression list lives in internal/state, which this
// package may not import (internal/layering): the gateway implements it.
type OptOuts interface {
	// ProviderOptOut puts to (E.164) on the suppression list as the
	// provider's entry; why is short, safe text (the provider's scrubbed
	// answer). It never logs or returns to in clear.
	ProviderOptOut(ctx context.Context, to, why string) error
}

// optedOut reports m's recipient to OptOuts. A failure is logged and
// counted, not retried: the message's fate does not depend on it, and the
// next send to the number gets the same answer and reports it again.
func (d *Dispatcher) optedOut(ctx context.Context, pe *provider.Error, m *sms.Message) {
	d.log.Info("provider refused the send: the recipient opted out", "id", m.ID, "class", m.Class.String(),
		"to", sms.MaskPhone(m.To))
	if d.cfg.OptOuts == nil {
		return
	}
	if err := d.cfg.OptOuts.ProviderOptOut(ctx, m.To, pe.Message); err != nil {
		d.m.loopErrors.WithLabelValues("opt_out").Inc()
		d.log.Warn("the provider's opt-out was not put on the suppression list; the next send to the number reports it again",
			"id", m.ID, "to", sms.MaskPhone(m.To), "err", err)
	}
}

// pauseEveryone pauses this process at once, then every replica through the
// shared limiter. When that fails this process still pauses.
func (d *Dispatcher) pauseEveryone(ctx context.Context, pause time.Duration) {
	d.pauseLocal(pause)
	if err := d.cfg.Limiter.Pause(ctx, pause); err != nil {
		d.m.loopErrors.WithLabelValues("pause").Inc()
		d.log.Error("shared pause failed; pausing this process only", "pause", pause, "err", err)
	}
}

// record429 counts a 429 in the suspension guard's shared window and
// applies the new count here at once.
func (d *Dispatcher) record429(ctx context.Context) {
	if d.cfg.Guard == nil {
		return
	}
	n, err := d.cfg.Guard.Record429(ctx)
	if err != nil {
		d.m.loopErrors.WithLabelValues("guard").Inc()
		d.log.Warn("suspension guard: record 429 failed", "err", err)
		return
	}
	d.setGuardCount(n)
}

// Replies hears of every message sent, on both paths, from the sender it
// went out from: the gateway records who last messaged the recipient from
// that number, for replies. It must not block long and never fails the
// send.
type Replies interface {
	Sent(ctx context.Context, m *sms.Message)
}

// sentTo tells Replies that m was sent.
func (d *Dispatcher) sentTo(ctx context.Context, m *sms.Message) {
	if d.cfg.Replies == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	d.cfg.Replies.Sent(ctx, m)
}
