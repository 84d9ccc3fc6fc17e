package opsview

// Sender lanes as operators read them (the stats answer's sender_lanes,
// the dashboard's sender table): per lane, its configured limit, the rate
// this replica sends it at, whether and until when it is paused and why,
// and (when the queue reports them) its backlog and oldest waiting
// message.
//
// A lane is a sender with a limit of its own (limits.senders), named by
// its id, or "other": every sender without one, together. The set is
// fixed by the configuration, so nothing a request sends grows it, and a
// sender without a limit (a phone number, perhaps) is never shown.
//
// Sources. The rate counts the sends the provider accepted, by lane, as
// the dispatcher's provider calls pass (SenderLanes.Observe), over the
// last rateSeconds whole seconds: this replica's sends. The pause is the
// limiter's sender pause, shared by every replica (read from Redis; while
// Redis is away, what this process knows), for the configured senders;
// for "other", the longest pause this replica's own sends drew. The
// reason is that of the last sender-scoped answer this replica received
// for the lane, kept while the pause it set holds; a pause another
// replica set has no reason here ("" in the answer).

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/dispatch"
	"smsgw/internal/logsample"
	"smsgw/internal/metricdef"
	"smsgw/internal/provider"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// SenderLaneOther is the lane of every sender without a limit of its own.
const SenderLaneOther = dispatch.SenderOther

// rateSeconds is how many whole seconds a lane's rate is counted over.
const rateSeconds = 10

// SenderLane is one lane in the stats answer (sender_lanes).
type SenderLane struct {
	Sender string `json:"sender"` // a configured sender, or "other"
	// MaxRPS is the lane's configured limit; null for "other" (only the
	// account's and the class's limits apply).
	MaxRPS *float64 `json:"max_rps"`
	// Backlog and OldestSeconds are the queue's, per lane: absent when the
	// queue does not report them.
	Backlog       *int64   `json:"backlog,omitempty"`
	OldestSeconds *float64 `json:"oldest_seconds,omitempty"`
	// PausedUntil is when the lane's pause ends; null when it is not
	// paused. PauseReason is the provider's reason when this replica drew
	// the pause (throttled, queue_full, setup), else absent.
	PausedUntil *time.Time `json:"paused_until"`
	PauseReason string     `json:"pause_reason,omitempty"`
	// SentPerSecond is what this replica sent from the lane per second
	// over the last rateSeconds (the provider accepted).
	SentPerSecond float64 `json:"sent_per_second"`
}

// SenderPauseReader reads the senders' pauses (limiter.Shared,
// limiter.Local).
type SenderPauseReader interface {
	SenderPauses(ctx context.Context, senders []string) ([]time.Duration, error)
}

// laneState is what one lane's observed sends left.
type laneState struct {
	sec         [rateSeconds + 1]int64 // the Unix second each slot counts
	n           [rateSeconds + 1]int64
	reason      provider.Reason // of the last sender-scoped answer
	reasonUntil time.Time       // when the pause that answer set ends
}

// SenderLanes keeps the lanes' rates and the reasons of their pauses, and
// answers the stats' sender_lanes. Safe for concurrent use.
type SenderLanes struct {
	limits map[string]float64 // configured sender -> max_rps
	names  []string           // the configured senders, sorted
	pauses SenderPauseReader  // nil: none known beyond the answers seen
	now    func() time.Time

	mu    sync.Mutex
	lanes map[string]*laneState // every name and SenderLaneOther
}

// NewSenderLanes keeps the lanes of limits (sender -> max_rps), reading
// their pauses from pauses (nil: only the answers this replica sees).
func NewSenderLanes(limits map[string]float64, pauses SenderPauseReader, now func() time.Time) *SenderLanes {
	if now == nil {
		now = time.Now
	}
	l := &SenderLanes{limits: maps.Clone(limits), names: slices.Sorted(maps.Keys(limits)), pauses: pauses, now: now,
		lanes: map[string]*laneState{SenderLaneOther: {}}}
	for _, s := range l.names {
		l.lanes[s] = &laneState{}
	}
	return l
}

// lane is the lane of sender.
func (l *SenderLanes) lane(sender string) string {
	return dispatch.SenderLane(l.limits, sender)
}

// Observe wraps p: every send it accepts counts toward its lane's rate,
// and every answer of the sender's scope records the lane's reason.
func (l *SenderLanes) Observe(p provider.Provider) provider.Provider {
	return observedLanes{Provider: p, l: l}
}

type observedLanes struct {
	provider.Provider
	l *SenderLanes
}

// Send sends through the wrapped provider and counts the answer.
func (p observedLanes) Send(ctx context.Context, req *provider.Request) (provider.Result, error) {
	res, err := p.Provider.Send(ctx, req)
	p.l.record(req.From, err)
	return res, err
}

// record counts one provider answer for sender.
func (l *SenderLanes) record(sender string, err error) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.lanes[l.lane(sender)]
	if err == nil {
		s := now.Unix()
		i := s % int64(len(st.sec))
		if st.sec[i] != s {
			st.sec[i], st.n[i] = s, 0
		}
		st.n[i]++
		return
	}
	pe := provider.AsError(err)
	if pe == nil || pe.ScopeOf() != provider.ScopeSender {
		return
	}
	reason := pe.Reason
	if reason == provider.ReasonPartial {
		reason = pe.PartReason
	}
	st.reason = reason
	st.reasonUntil = later(st.reasonUntil, now.Add(provider.ClampRetryAfter(pe.RetryAfter)))
	if reason == provider.ReasonSetup {
		st.reasonUntil = later(st.reasonUntil, now.Add(dispatch.AuthPause))
	}
}

// Read is every lane, the configured senders sorted and "other" last. The
// pauses are read from the limiter within ctx; when it does not answer,
// the pauses this replica drew stand in for them.
func (l *SenderLanes) Read(ctx context.Context) []SenderLane {
	var left []time.Duration
	if l.pauses != nil && len(l.names) > 0 {
		left, _ = l.pauses.SenderPauses(ctx, l.names) // unread: the answers seen below
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]SenderLane, 0, len(l.names)+1)
	for i, name := range append(slices.Clone(l.names), SenderLaneOther) {
		st := l.lanes[name]
		lane := SenderLane{Sender: sms.SenderLabel(name), SentPerSecond: st.rate(now)}
		if r, ok := l.limits[name]; ok {
			lane.MaxRPS = &r
		}
		var until time.Time
		if i < len(left) && left[i] > 0 {
			until = now.Add(left[i])
		}
		if st.reasonUntil.After(now) {
			lane.PauseReason = string(st.reason)
			if left == nil || name == SenderLaneOther {
				until = later(until, st.reasonUntil)
			}
		}
		if !until.IsZero() {
			u := until.UTC()
			lane.PausedUntil = &u
		} else {
			lane.PauseReason = ""
		}
		out = append(out, lane)
	}
	return out
}

// rate is the lane's accepted sends per second over the last rateSeconds
// whole seconds.
func (st *laneState) rate(now time.Time) float64 {
	s := now.Unix()
	var n int64
	for i := range st.sec {
		if d := s - st.sec[i]; d >= 1 && d <= rateSeconds {
			n += st.n[i]
		}
	}
	return float64(n) / rateSeconds
}

// SenderLanes is the stats answer's sender_lanes: empty, never null,
// without lanes kept.
func (s *LiveStats) SenderLanes(ctx context.Context) []SenderLane {
	if s.Lanes == nil {
		return []SenderLane{}
	}
	return s.Lanes.Read(ctx)
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// The queue's backlog per sender lane (queue.LaneReader), by the lanes
// above: a sender of limits.senders by its id, every other
// sender (the provider's default one included) summed as "other", so
// nothing a request sends grows the labels. It fills the stats answer's
// sender_lanes backlog and oldest_seconds, and the smsgw_queue_sender_*
// metrics.

// laneBacklog is one lane's queued messages.
type laneBacklog struct {
	byClass [NumLaneClasses]int64
	total   int64
	oldest  time.Duration // of its oldest due message
}

// NumLaneClasses sizes per-class counts: the classes are otp..marketing.
const NumLaneClasses = int(sms.ClassMarketing) + 1

// laneBacklogs folds the queue's lanes into the lanes of limits (sender ->
// max_rps): every configured sender and other, present even when empty.
func laneBacklogs(lanes []queue.LaneStats, limits map[string]float64) map[string]*laneBacklog {
	out := map[string]*laneBacklog{SenderLaneOther: {}}
	for s := range limits {
		out[s] = &laneBacklog{}
	}
	for _, l := range lanes {
		b := out[dispatch.SenderLane(limits, l.Lane)]
		for c, n := range l.Queued {
			if c.Valid() {
				b.byClass[c] += n
				b.total += n
			}
		}
		b.oldest = max(b.oldest, l.OldestAge)
	}
	return out
}

// withBacklog sets each lane's backlog and oldest_seconds from the
// queue's lanes. A lane in sl is named by its sender's label
// (sms.SenderLabel), unique among the configured senders.
func withBacklog(sl []SenderLane, lanes []queue.LaneStats, limits map[string]float64) {
	bs := map[string]*laneBacklog{}
	for name, b := range laneBacklogs(lanes, limits) {
		bs[sms.SenderLabel(name)] = b
	}
	for i := range sl {
		if b, ok := bs[sl[i].Sender]; ok {
			n, age := b.total, b.oldest.Seconds()
			sl[i].Backlog, sl[i].OldestSeconds = &n, &age
		}
	}
}

// SenderLaneCollector exports each sender lane's backlog at scrape time:
// smsgw_queue_sender_backlog{sender,class},
// smsgw_queue_sender_oldest_seconds{sender} and, for a configured sender,
// smsgw_queue_sender_drain_seconds{sender} (its backlog ÷ its max_rps:
// how long its queued messages take at its limit). With Redis every
// replica reports the same shared queue: aggregate with max.
type SenderLaneCollector struct {
	q       queue.LaneReader
	limits  map[string]float64
	log     *slog.Logger
	timeout time.Duration
	backlog *prometheus.Desc
	oldest  *prometheus.Desc
	drain   *prometheus.Desc
	failLog logsample.Sampler
}

// NewSenderLaneCollector reports q's sender lanes; limits is sender ->
// max_rps of limits.senders.
func NewSenderLaneCollector(q queue.LaneReader, limits map[string]float64, log *slog.Logger) *SenderLaneCollector {
	return &SenderLaneCollector{
		q: q, limits: limits, log: log, timeout: 2 * time.Second,
		backlog: metricdef.Desc("smsgw_queue_sender_backlog",
			"Queued messages by sender lane (a sender of limits.senders, or other: every other sender summed) and class.", "sender", "class"),
		oldest: metricdef.Desc("smsgw_queue_sender_oldest_seconds",
			"How long the oldest due message of a sender lane (a sender of limits.senders, or other) has waited.", "sender"),
		drain: metricdef.Desc("smsgw_queue_sender_drain_seconds",
			"A configured sender's queued messages divided by its limits.senders.<sender>.max_rps: how long they take to send at its limit.", "sender"),
	}
}

// Describe implements prometheus.Collector.
func (c *SenderLaneCollector) Describe(ch chan<- *prometheus.Desc) {
	metricdef.Describe(ch, c.backlog, c.oldest, c.drain)
}

// Collect implements prometheus.Collector: one read of the lanes per
// scrape; nothing when the store does not answer (smsgw_queue_stats_up
// says so).
func (c *SenderLaneCollector) Collect(ch chan<- prometheus.Metric) {
	lanes, ok := scrapeRead(c.timeout, &c.failLog, c.log, "metrics: sender lanes", c.q.Lanes)
	if !ok {
		return
	}
	for name, b := range laneBacklogs(lanes, c.limits) {
		for _, cl := range sms.Classes {
			ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(b.byClass[cl]), sms.SenderLabel(name), cl.String())
		}
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, b.oldest.Seconds(), sms.SenderLabel(name))
		if r := c.limits[name]; r > 0 {
			ch <- prometheus.MustNewConstMetric(c.drain, prometheus.GaugeValue, float64(b.total)/r, sms.SenderLabel(name))
		}
	}
}
