package opsview

// The queue's backlog per sender lane (queue.LaneReader), in the lanes of
// senderlanes.go: a sender of limits.senders by its id, every other
// sender (the provider's default one included) summed as "other", so
// nothing a request sends grows the labels. It fills the stats answer's
// sender_lanes backlog and oldest_seconds, and the smsgw_queue_sender_*
// metrics.

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/logsample"
	"smsgw/internal/metricdef"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

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
		name := l.Lane
		if _, ok := limits[name]; !ok {
			name = SenderLaneOther
		}
		b := out[name]
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
// queue's lanes.
func withBacklog(sl []SenderLane, lanes []queue.LaneStats, limits map[string]float64) {
	bs := laneBacklogs(lanes, limits)
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
			ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(b.byClass[cl]), name, cl.String())
		}
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, b.oldest.Seconds(), name)
		if r := c.limits[name]; r > 0 {
			ch <- prometheus.MustNewConstMetric(c.drain, prometheus.GaugeValue, float64(b.total)/r, name)
		}
	}
}
