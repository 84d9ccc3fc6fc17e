package opsview

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/logsample"
	"smsgw/internal/metricdef"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// statsLogEvery is the most often a failed read of the queue's
// statistics is logged.
const statsLogEvery = 10 * time.Second

// QueueCollector exports the queue's depth per class and state, and the age
// of each class's oldest due message, read from the queue at scrape time:
// the figures operators alert on (a marketing backlog is normal; an OTP
// backlog or a growing oldest age is not). With Redis every replica reports
// the same shared queue, so aggregate with max, not sum.
type QueueCollector struct {
	q       queue.Queue
	log     *slog.Logger
	timeout time.Duration
	depth   *prometheus.Desc
	oldest  *prometheus.Desc
	up      *prometheus.Desc
	// failLog samples the failed reads: a scrape needs no key where
	// /metrics is on the producers' port.
	failLog logsample.Sampler
}

// NewQueueCollector reports q's depths at every scrape.
func NewQueueCollector(q queue.Queue, log *slog.Logger) *QueueCollector {
	return &QueueCollector{
		q: q, log: log, timeout: 2 * time.Second,
		depth:  metricdef.Desc("smsgw_queue_messages", "Messages in the queue by class and state (ready, scheduled, leased, dead).", "class", "state"),
		oldest: metricdef.Desc("smsgw_queue_oldest_age_seconds", "How long the oldest due message of a class has waited.", "class"),
		up:     metricdef.Desc("smsgw_queue_stats_up", "1 when the last scrape could read the queue's statistics, 0 when the store did not answer."),
	}
}

// Describe implements prometheus.Collector.
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	metricdef.Describe(ch, c.depth, c.oldest, c.up)
}

// scrapeRead runs one read of a collector within timeout; a failure is
// logged (at most every statsLogEvery, as msg) and reported false.
func scrapeRead[T any](timeout time.Duration, failLog *logsample.Sampler, log *slog.Logger, msg string,
	read func(context.Context) (T, error)) (T, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	v, err := read(ctx)
	if err != nil {
		if n, ok := failLog.Add(time.Now(), statsLogEvery); ok {
			log.Warn(msg, "count", n, "err", err)
		}
		return v, false
	}
	failLog.Reset()
	return v, true
}

// Collect implements prometheus.Collector: one queue read per scrape.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := scrapeRead(c.timeout, &c.failLog, c.log, "metrics: queue stats", c.q.Stats)
	if !ok {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for _, cl := range sms.Classes {
		s := st[cl]
		name := cl.String()
		for _, v := range []struct {
			state string
			n     int64
		}{{"ready", s.Ready}, {"scheduled", s.Scheduled}, {"leased", s.Leased}, {"dead", s.Dead}} {
			ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(v.n), name, v.state)
		}
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, s.OldestAge.Seconds(), name)
	}
}
