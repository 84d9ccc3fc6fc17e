package redisq

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/metricdef"
	"smsgw/internal/queue"
)

// ops is the closed label set of the op label.
var ops = []string{"enqueue", "take", "extend", "complete", "requeue", "dead", "recover", "retry_dead", "read", "receipt", "cancel", "compact", "record_sent"}

// The outcomes of one second a compaction read, the result label of
// compactions: compacted; changed, its LIST or blob written since the read
// (the compare-and-set failed: a later pass takes it); gone, nothing left
// to compact (its LIST expired, or another compaction took it first);
// unreadable, left uncompacted (logged).
const (
	compactDone       = "compacted"
	compactChanged    = "changed"
	compactGone       = "gone"
	compactUnreadable = "unreadable"
)

var compactResults = []string{compactDone, compactChanged, compactGone, compactUnreadable}

type metrics struct {
	duration    *prometheus.HistogramVec
	errors      *prometheus.CounterVec
	compactions *prometheus.CounterVec
	dataLost    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		duration:    metricdef.HistogramVec("smsgw_queue_redis_op_duration_seconds", "Time of one Redis queue operation (one script or pipeline).", []float64{.0002, .0005, .001, .002, .005, .01, .025, .05, .1, .25, 1}, "op"),
		errors:      metricdef.CounterVec("smsgw_queue_redis_errors_total", "Redis queue operations that failed (Redis or decoding errors; not empty, lease lost or not found).", "op"),
		compactions: metricdef.CounterVec("smsgw_queue_redis_compactions_total", "Creation seconds of final records a compaction read, by result: compacted, changed (written since the read: left for a later pass), gone (nothing left to compact), unreadable. All but compacted are reads that compacted nothing.", "result"),
		dataLost:    metricdef.Counter("smsgw_queue_redis_data_lost_total", "Times this replica found the account's data gone from Redis (restarted without persistence, flushed, or failed over to an empty replica): messages, pauses, idempotency keys and suppressions written before are lost."),
	}
	for _, op := range ops {
		m.duration.WithLabelValues(op)
		m.errors.WithLabelValues(op)
	}
	for _, r := range compactResults {
		m.compactions.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	// A queue reopened on the same registry shares the first one's metrics.
	var err error
	if m.duration, err = queue.RegisterMetric(reg, m.duration); err != nil {
		return nil, err
	}
	if m.errors, err = queue.RegisterMetric(reg, m.errors); err != nil {
		return nil, err
	}
	if m.compactions, err = queue.RegisterMetric(reg, m.compactions); err != nil {
		return nil, err
	}
	if m.dataLost, err = queue.RegisterMetric(reg, m.dataLost); err != nil {
		return nil, err
	}
	return m, nil
}

// compaction counts one second a compaction read, by its result.
func (m *metrics) compaction(result string) { m.compactions.WithLabelValues(result).Inc() }

// observe records one operation that started at start.
func (m *metrics) observe(op string, start time.Time, err error) {
	m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	// The seam's answers are outcomes, not failures of Redis.
	if err != nil && !errors.Is(err, queue.ErrEmpty) && !errors.Is(err, queue.ErrLeaseLost) && !errors.Is(err, queue.ErrNotFound) {
		m.errors.WithLabelValues(op).Inc()
	}
}
