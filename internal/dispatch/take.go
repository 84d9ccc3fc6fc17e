package dispatch

// The send path, one named step per function, in the order a message meets
// them:
//
//	take → receipt check → expire check → reserve → sleep delay → breaker → send → answered → outcome
//
// One file per stage: take.go (take, receipt and expire checks), reserve.go
// (reserve), send.go (sleep delay, breaker, send) and record.go (outcome:
// the message's fate written to the queue).
// take, expire check and reserve run in the lane's pacer; the rest in a
// sender goroutine. Each step logs and counts what it decides. The OTP fast
// path (sendnow.go) runs the same reservation (reserveSlot), breaker, send
// and answered steps; only the message's fate (outcome here, a typed error
// there) differs. What an answer means is decided in outcome.go.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

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

// Step 2d: a message of a producer an operator paused is set aside on its
// producer's shelf (queue.Shelver), keeping its place in line: a take
// meets it once per pause, and it comes back when the pause ends. It
// spends no attempt and no rate.
func (d *Dispatcher) shelveCheck(f *flight) bool {
	m := f.l.Message
	if d.cfg.Held == nil || d.cfg.Shelf == nil || !d.cfg.Held.ProducerHeld(d.takeCtx, m.Producer) {
		return false
	}
	sv, ok := d.cfg.Queue.(queue.Shelver)
	if !ok {
		return false
	}
	d.log.Debug("producer paused: set aside", "id", m.ID, "class", m.Class.String(), "producer", m.Producer)
	d.m.requeues.WithLabelValues(m.Class.String(), requeueProducerPaused).Inc()
	d.ack(f, "requeue", outcomeRequeued, func(ctx context.Context) error {
		return sv.SetAside(ctx, f.l, d.cfg.Shelf(m.Producer))
	})
	return true
}

// gone reports whether f was ended or put back before reserving: already
// at the provider (a receipt came), expired, set aside for its producer's
// pause, or held for quiet hours.
func (d *Dispatcher) gone(f *flight) bool {
	return d.receivedCheck(f) || d.expireCheck(f) || d.shelveCheck(f) || d.holdCheck(f)
}
