package redisq

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/queue"
)

// ops is the closed label set of the op label.
var ops = []string{"enqueue", "take", "extend", "complete", "requeue", "dead", "recover", "retry_dead", "read", "receipt", "cancel", "compact"}

type metrics struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "smsgw_queue_redis_op_duration_seconds",
			Help:    "Time of one Redis queue operation (one script or pipeline).",
			Buckets: []float64{.0002, .0005, .001, .002, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smsgw_queue_redis_errors_total",
			Help: "Redis queue operations that failed (Redis or decoding errors; not empty, lease lost or not found).",
		}, []string{"op"}),
	}
	for _, op := range ops {
		m.duration.WithLabelValues(op)
		m.errors.WithLabelValues(op)
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
	return m, nil
}

// observe records one operation that started at start.
func (m *metrics) observe(op string, start time.Time, err error) {
	m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	// The seam's answers are outcomes, not failures of Redis.
	if err != nil && !errors.Is(err, queue.ErrEmpty) && !errors.Is(err, queue.ErrLeaseLost) && !errors.Is(err, queue.ErrNotFound) {
		m.errors.WithLabelValues(op).Inc()
	}
}
