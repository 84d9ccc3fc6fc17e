package opsview

import (
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/logsample"
	"smsgw/internal/metricdef"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// SenderOther is the name of every sender without a limit of its own
// (limits.senders) in the sender lanes' figures, summed: a label of its
// own per sender would let producers grow the metrics without bound.
const SenderOther = "other"

// SenderLane is one sender's lane in the stats answer (sender_lanes): a
// sender with a configured limit, or every other summed as "other".
type SenderLane struct {
	Sender string `json:"sender"`
	// MaxRPS is limits.senders.<sender>.max_rps; null for other.
	MaxRPS *float64 `json:"max_rps"`
	// Backlog is the sender's queued messages, every class.
	Backlog int64 `json:"backlog"`
	// OldestSeconds is how long its oldest due message has waited.
	OldestSeconds float64 `json:"oldest_seconds"`
	// PausedUntil is when the lane's hold in the queue ends (the
	// sender's pause, or its next slot under its limit); null when not
	// held. For other, the latest of theirs.
	PausedUntil *time.Time `json:"paused_until"`
}

// senderLane is the label of lane: itself when limits has it, else other.
func senderLane(lane string, limits map[string]float64) string {
	if _, ok := limits[lane]; ok {
		return lane
	}
	return SenderOther
}

// SenderLanes folds the queue's lanes into one entry per configured
// sender (limits: sender -> max_rps), every one listed even when empty,
// sorted, then other.
func SenderLanes(lanes []queue.LaneStats, limits map[string]float64, now time.Time) []SenderLane {
	names := append(slices.Sorted(maps.Keys(limits)), SenderOther)
	out := make([]SenderLane, len(names))
	at := make(map[string]int, len(names))
	for i, n := range names {
		out[i].Sender, at[n] = n, i
		if r, ok := limits[n]; ok {
			out[i].MaxRPS = &r
		}
	}
	for _, l := range lanes {
		s := &out[at[senderLane(l.Lane, limits)]]
		for _, n := range l.Queued {
			s.Backlog += n
		}
		s.OldestSeconds = max(s.OldestSeconds, l.OldestAge.Seconds())
		if l.HeldFor > 0 {
			until := now.Add(l.HeldFor).UTC()
			if s.PausedUntil == nil || until.After(*s.PausedUntil) {
				s.PausedUntil = &until
			}
		}
	}
	return out
}

// SenderLaneCollector exports each sender lane's backlog at scrape time,
// labelled by sender only for senders with a configured limit, all others
// summed as other: smsgw_queue_sender_backlog{sender,class},
// smsgw_queue_sender_oldest_seconds{sender} and, for configured senders,
// smsgw_queue_sender_drain_seconds{sender} (backlog ÷ max_rps: how long
// the sender's queued messages take at its limit). With Redis every
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
	byClass := map[string]map[sms.Class]int64{}
	for _, l := range lanes {
		s := senderLane(l.Lane, c.limits)
		if byClass[s] == nil {
			byClass[s] = map[sms.Class]int64{}
		}
		for cl, n := range l.Queued {
			byClass[s][cl] += n
		}
	}
	for _, s := range SenderLanes(lanes, c.limits, time.Now()) {
		for _, cl := range sms.Classes {
			ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(byClass[s.Sender][cl]), s.Sender, cl.String())
		}
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, s.OldestSeconds, s.Sender)
		if s.MaxRPS != nil && *s.MaxRPS > 0 {
			ch <- prometheus.MustNewConstMetric(c.drain, prometheus.GaugeValue, float64(s.Backlog) / *s.MaxRPS, s.Sender)
		}
	}
}
