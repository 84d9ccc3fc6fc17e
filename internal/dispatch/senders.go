package dispatch

// Sender lanes: the provider limits each sender (a send's "from") as well
// as the account, and a sender's limit or pause must hold back that
// sender's messages only. The limiter decides a send's sender level in the
// same step as its account and class (limiter.Request.Sender); here is
// what the send loop does with a sender's answers:
//
//   - a reservation denied by the sender alone (its pause, or its own
//     limit, which never books ahead) holds that sender's lane in the
//     queue (queue.LaneHolder) until the sender's next free slot, on
//     every replica sharing the queue, and puts the message back at its
//     place in the lane without spending an attempt; it keeps no class
//     off: the pacer takes the next message at once, and the take passes
//     the held lane over without meeting its backlog. With a queue
//     without lanes (or when the hold fails) the message goes back due
//     at the sender's next free slot instead, successive messages of one
//     sender one interval of that sender apart (senderSpread);
//   - a provider answer of the sender's scope (a throttle or queue full
//     of that sender, the sender's setup) pauses that sender on every
//     replica through the limiter's shared sender pause, never shortened,
//     and in this process, and holds its lane for the pause; it is not
//     the account's 429: no other sender pauses and the suspension guard
//     does not count it;
//   - a sender holding a slot granted before its sender's pause does not
//     send into it (the batch gate and this check keep a throttled sender
//     to one 429 per replica).
//
// Label values of the sender metrics come from the configuration: a
// sender with a limit of its own is its own label, any other is "other".

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/limiter"
	"smsgw/internal/metricdef"
	"smsgw/internal/provider"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// SenderOther is the lane of every sender without a limit of its own.
const SenderOther = "other"

// SenderLane is sender's lane among the configured senders (those of
// limits.senders): the sender itself when it has a limit of its own, else
// SenderOther. The set of lanes is so fixed by the configuration, and
// nothing a request sends grows it. Shown outside the configuration, a
// lane is its sms.SenderLabel.
func SenderLane[V any](configured map[string]V, sender string) string {
	if _, ok := configured[sender]; ok {
		return sender
	}
	return SenderOther
}

// senderLabel is the metric label of sender.
func (d *Dispatcher) senderLabel(sender string) string {
	return sms.SenderLabel(SenderLane(d.cfg.Pacing.Senders, sender))
}

// senderPauseLeft is how long this process knows sender to be paused.
func (d *Dispatcher) senderPauseLeft(sender string) time.Duration {
	return max(time.Duration(d.senderPauses.Get(sender)-time.Now().UnixNano()), 0)
}

// SenderPauseLeft is how long this process knows sender to be paused (a
// provider's answer of the sender's scope): sender pools pass it over.
func (d *Dispatcher) SenderPauseLeft(sender string) time.Duration { return d.senderPauseLeft(sender) }

// pauseSenderLocal extends this process's copy of sender's pause to now+p.
func (d *Dispatcher) pauseSenderLocal(sender string, p time.Duration) {
	now := time.Now().UnixNano()
	d.senderPauses.Update(sender, now, func(cur int64) int64 { return max(cur, now+int64(p)) })
}

// senderWait puts a batch of one sender back after the limiter denied it
// for the sender alone, without spending an attempt and without keeping
// the lane off the class: its lane held until the sender's next free
// slot (holdSender).
func (d *Dispatcher) senderWait(batch []*flight, dec limiter.Decision) {
	m := batch[0].l.Message
	label := d.senderLabel(m.From)
	reason := requeueSenderLimit
	if dec.SenderPaused {
		reason = requeueSenderPaused
		d.pauseSenderLocal(m.From, dec.RetryAfter)
	}
	d.sm.waits.WithLabelValues(label, reason).Add(float64(len(batch)))
	d.holdSender(batch, dec.RetryAfter, reason)
}

// holdSender holds the lane of a batch of one sender in the queue for
// hold (never shortening a longer hold) and puts the batch back at its
// place in the lane, so that the lane keeps its order and a take passes
// it over until then. A queue without lanes, or a hold that fails, puts
// the batch back due after hold instead, spread one interval of the
// sender apart from the messages of the same sender this process put
// back before.
func (d *Dispatcher) holdSender(batch []*flight, hold time.Duration, reason string) {
	m := batch[0].l.Message
	hold = max(hold, time.Millisecond)
	if lh, ok := d.cfg.Queue.(queue.LaneHolder); ok {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(d.runCtx), ackTimeout)
		err := lh.HoldLane(ctx, queue.LaneOf(m), hold)
		cancel()
		if err == nil {
			for _, f := range batch {
				d.putBack(f, reason)
			}
			return
		}
		d.m.loopErrors.WithLabelValues("hold").Inc()
		d.log.Warn("sender's lane not held; its messages go back due at its next slot", "sender_lane", d.senderLabel(m.From), "err", err)
	}
	var interval time.Duration
	if r, ok := d.cfg.Pacing.Senders[m.From]; ok && r.PerSecond > 0 {
		interval = time.Duration(float64(time.Second) / r.PerSecond)
	}
	now := time.Now()
	for _, f := range batch {
		due := now.Add(hold).UnixNano()
		if interval > 0 {
			step := int64(interval) * int64(d.cost(f.l.Message))
			due = d.senderSpread.Update(m.From, now.UnixNano(), func(cur int64) int64 { return max(cur, due) + step }) - step
		}
		d.requeue(f, time.Duration(due-now.UnixNano()), false, reason, "")
	}
}

// bySender splits a batch into runs of one sender each, in order of first
// appearance: the limiter decides each sender's level for its own run.
func bySender(batch []*flight) [][]*flight {
	if len(batch) == 1 {
		return [][]*flight{batch}
	}
	var out [][]*flight
	at := map[string]int{}
	for _, f := range batch {
		s := f.l.Message.From
		i, ok := at[s]
		if !ok {
			i = len(out)
			at[s] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], f)
	}
	return out
}

// senderLimited reports whether a batch of one sender is more than one
// message of a sender with a limit of its own: its messages are reserved
// one by one, as the sender's key passes a cost above its burst only for
// one message (limiter.Request.Sender).
func (d *Dispatcher) senderLimited(batch []*flight) bool {
	_, ok := d.cfg.Pacing.Senders[batch[0].l.Message.From]
	return ok && len(batch) > 1
}

// senderScoped reports whether pe is an answer of the sender's scope that
// pauses the sender: its throttle, its queue full at the vendor, or its
// setup.
func senderScoped(pe *provider.Error) bool {
	return pe != nil && pe.ScopeOf() == provider.ScopeSender
}

// senderAnswered pauses sender on every replica after an answer of the
// sender's scope: for the Retry-After of a throttle or queue full, for
// AuthPause for its setup. It returns the pause in force. Never the
// account's: no other sender pauses and the suspension guard does not
// count it.
func (d *Dispatcher) senderAnswered(ctx context.Context, pe *provider.Error, sender string, m *sms.Message) time.Duration {
	pause := provider.ClampRetryAfter(pe.RetryAfter)
	setup := pe.Reason == provider.ReasonSetup || pe.PartReason == provider.ReasonSetup
	if setup {
		pause = AuthPause
	}
	d.pauseSenderLocal(sender, pause)
	inForce, err := d.cfg.Limiter.PauseSender(ctx, sender, pause)
	if err != nil {
		d.m.loopErrors.WithLabelValues("pause").Inc()
		d.log.Error("shared sender pause failed; pausing it in this process only", "pause", pause, "err", err)
		inForce = pause
	}
	label := d.senderLabel(sender)
	d.sm.pauses.WithLabelValues(label, string(pe.Reason)).Inc()
	attrs := []any{"sender", sms.MaskPhone(sender), "sender_lane", label, "reason", string(pe.Reason), "pause", inForce}
	if m != nil {
		attrs = append(attrs, "id", m.ID, "class", m.Class.String())
	}
	if setup {
		d.log.Error("provider refused the sender's setup: that sender paused on every replica; fix the sender at the provider", append(attrs, "err", pe.Error())...)
	} else {
		d.log.Warn("provider throttled a sender: that sender paused on every replica", attrs...)
	}
	return max(inForce, pause)
}

// ProviderSaid applies what a provider said outside a send's answer (a
// delivery receipt's error code: provider.Receipt.Said) as the send
// paths apply an answer: of the sender's scope it pauses sender on every
// replica; a throttle, suspension or setup refusal of the account's pauses
// every replica, and is logged as an error. It returns the pause.
func (d *Dispatcher) ProviderSaid(ctx context.Context, pe *provider.Error, sender string) time.Duration {
	if pe == nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	if senderScoped(pe) {
		d.sm.reported.WithLabelValues(string(provider.ScopeSender)).Inc()
		return d.senderAnswered(ctx, pe, sender, nil)
	}
	kind := classify(pe, false)
	if kind == kindThrottled || kind == kindAuth {
		d.sm.reported.WithLabelValues(string(provider.ScopeAccount)).Inc()
	}
	switch kind {
	case kindThrottled:
		pause := min(provider.ClampRetryAfter(pe.RetryAfter), provider.MaxRetryAfter)
		d.pauseEveryone(ctx, pause)
		d.log.Error("provider reported the account unable to send: every replica paused", "reason", string(pe.Reason),
			"pause", pause, "err", pe.Error())
		return pause
	case kindAuth:
		d.pauseEveryone(ctx, AuthPause)
		d.log.Error("provider reported the account's setup refused: every replica paused", "reason", string(pe.Reason),
			"pause", AuthPause, "err", pe.Error())
		return AuthPause
	}
	return 0
}

// Reasons a message goes back for its sender (smsgw_dispatch_requeues_total
// and smsgw_dispatch_sender_waits_total).
const (
	requeueSenderLimit  = "sender_limit"  // its sender's own limit: due at the sender's next slot
	requeueSenderPaused = "sender_paused" // its sender is paused (a throttle of that sender)
)

// senderMetrics are the metrics of the sender lanes; label values are the
// configured senders and "other".
type senderMetrics struct {
	waits    *prometheus.CounterVec // sender, reason
	pauses   *prometheus.CounterVec // sender, reason
	reported *prometheus.CounterVec // scope
	pause    *prometheus.Desc       // sender
	d        *Dispatcher
}

func newSenderMetrics(reg prometheus.Registerer, d *Dispatcher) (*senderMetrics, error) {
	m := &senderMetrics{
		waits: metricdef.CounterVec("smsgw_dispatch_sender_waits_total",
			"Messages put back for their sender alone (its own limit, or its pause), by sender (a configured one, or other) and reason.", "sender", "reason"),
		pauses: metricdef.CounterVec("smsgw_dispatch_sender_pauses_total",
			"Provider answers of a sender's scope that paused that sender on every replica, by sender (a configured one, or other) and reason.", "sender", "reason"),
		reported: metricdef.CounterVec("smsgw_dispatch_reported_pauses_total",
			"Pauses a provider's report outside a send's answer (a delivery receipt's error code) set, by scope: a sender's, or the account's (suspended, daily limit).", "scope"),
		pause: metricdef.Desc("smsgw_dispatch_sender_pause_remaining_seconds",
			"How long the sender's pause still holds, as this process knows it (other: the longest of the senders without a limit of their own).", "sender"),
		d: d,
	}
	if err := metricdef.Register(reg, m.waits, m.pauses, m.reported, m); err != nil {
		return nil, fmt.Errorf("dispatch: register sender metrics: %w", err)
	}
	for _, s := range []provider.Scope{provider.ScopeSender, provider.ScopeAccount} {
		m.reported.WithLabelValues(string(s))
	}
	for _, s := range m.labels() {
		for _, r := range []string{requeueSenderLimit, requeueSenderPaused} {
			m.waits.WithLabelValues(s, r)
		}
		for _, r := range []provider.Reason{provider.ReasonThrottled, provider.ReasonQueueFull, provider.ReasonSetup} {
			m.pauses.WithLabelValues(s, string(r))
		}
	}
	return m, nil
}

// labels are the configured senders and "other", sorted.
func (m *senderMetrics) labels() []string {
	var out []string
	for s := range m.d.cfg.Pacing.Senders {
		out = append(out, sms.SenderLabel(s))
	}
	return append(slices.Sorted(slices.Values(out)), SenderOther)
}

func (m *senderMetrics) Describe(ch chan<- *prometheus.Desc) { metricdef.Describe(ch, m.pause) }

// Collect reads the pauses at scrape time: each configured sender's, and
// the longest of the others.
func (m *senderMetrics) Collect(ch chan<- prometheus.Metric) {
	now := time.Now().UnixNano()
	left := map[string]float64{}
	m.d.senderPauses.Each(func(s string, until int64) {
		l := m.d.senderLabel(s)
		left[l] = max(left[l], time.Duration(max(until-now, 0)).Seconds())
	})
	for _, l := range m.labels() {
		ch <- prometheus.MustNewConstMetric(m.pause, prometheus.GaugeValue, left[l], l)
	}
}
