package webhook

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/logsample"
	"smsgw/internal/metricdef"
	"smsgw/internal/queue"
)

// Metrics are the deliverer's counters; the backlog gauges are read from
// the outbox at scrape time (NewBacklogCollector).
type Metrics struct {
	attempts *prometheus.CounterVec
	deferred *prometheus.CounterVec
	dead     prometheus.Counter
	duration prometheus.Histogram
}

// NewMetrics registers the deliverer's metrics on reg (nil: not exported),
// every label set at zero.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		attempts: metricdef.CounterVec("smsgw_callbacks_attempts_total", "Status callback delivery attempts by outcome: delivered (2xx), rejected (other status), gone (410: given up at once), timeout, error, refused (address not allowed).", "outcome"),
		deferred: metricdef.CounterVec("smsgw_callbacks_deferred_total", "Status callbacks put back without an attempt because their endpoint was busy or its breaker open.", "reason"),
		dead:     metricdef.Counter("smsgw_callbacks_dead_total", "Status callbacks given up by this replica: after webhooks.max_age, or at once when the endpoint answered 410 Gone."),
		duration: metricdef.Histogram("smsgw_callbacks_attempt_duration_seconds", "Time of one status callback delivery attempt.", []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}),
	}
	for _, o := range Outcomes {
		m.attempts.WithLabelValues(o)
	}
	for _, r := range []string{deferBusy, deferBreaker} {
		m.deferred.WithLabelValues(r)
	}
	if reg != nil {
		if err := metricdef.Register(reg, m.attempts, m.deferred, m.dead, m.duration); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// statsLogEvery is the most often a failed outbox read is logged.
const statsLogEvery = 10 * time.Second

// backlogCollector exports the outbox's depth, read at scrape time. With
// Redis every replica reports the same shared outbox: aggregate with max.
type backlogCollector struct {
	o       queue.Outbox
	log     *slog.Logger
	backlog *prometheus.Desc
	oldest  *prometheus.Desc
	dead    *prometheus.Desc
	// failLog samples the failed reads (one line per 10 s with a count):
	// a scrape needs no key where /metrics is on the producers' port.
	failLog logsample.Sampler
}

// NewBacklogCollector exports smsgw_callbacks_backlog,
// smsgw_callbacks_oldest_age_seconds and smsgw_callbacks_dead_events (not
// "smsgw_callbacks_dead": OpenMetrics would give the counter
// smsgw_callbacks_dead_total that family name too).
func NewBacklogCollector(o queue.Outbox, log *slog.Logger) prometheus.Collector {
	return &backlogCollector{
		o: o, log: log,
		backlog: metricdef.Desc("smsgw_callbacks_backlog", "Status callbacks not yet delivered (due, waiting for a retry, or being delivered)."),
		oldest:  metricdef.Desc("smsgw_callbacks_oldest_age_seconds", "Age of the oldest status callback not yet delivered."),
		dead:    metricdef.Desc("smsgw_callbacks_dead_events", "Status callbacks given up and listed at GET /v1/admin/callbacks/dead."),
	}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	metricdef.Describe(ch, c.backlog, c.oldest, c.dead)
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := c.o.OutboxStats(ctx)
	if err != nil {
		// No sample rather than a wrong one; smsgw_queue_stats_up tells
		// the store is not answering.
		if n, ok := c.failLog.Add(time.Now(), statsLogEvery); ok {
			c.log.Warn("metrics: outbox stats", "count", n, "err", err)
		}
		return
	}
	c.failLog.Reset()
	ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(s.Backlog))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, s.OldestAge.Seconds())
	ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(s.Dead))
}
