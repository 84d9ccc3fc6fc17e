package embedded

import (
	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/metricdef"
	"smsgw/internal/queue"
)

type metrics struct {
	commitSeconds prometheus.Histogram
	commitOps     prometheus.Histogram
	commitErrors  prometheus.Counter
	recovered     prometheus.Counter
	pruned        prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		commitSeconds: metricdef.Histogram("smsgw_queue_embedded_commit_duration_seconds", "Time of one group commit of the embedded store, fsync included.", []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, 1}),
		commitOps:     metricdef.Histogram("smsgw_queue_embedded_commit_ops", "Operations sharing one group commit (one fsync).", []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}),
		commitErrors:  metricdef.Counter("smsgw_queue_embedded_commit_errors_total", "Group commits that failed (storage errors)."),
		recovered:     metricdef.Counter("smsgw_queue_embedded_recovered_total", "Expired leases handed back to the ready queue."),
		pruned:        metricdef.Counter("smsgw_queue_embedded_pruned_total", "Terminal messages deleted after the retention."),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	// A store reopened on the same registry keeps counting on the first
	// queue's collectors.
	if m.commitSeconds, err = queue.RegisterMetric(reg, m.commitSeconds); err != nil {
		return nil, err
	}
	if m.commitOps, err = queue.RegisterMetric(reg, m.commitOps); err != nil {
		return nil, err
	}
	if m.commitErrors, err = queue.RegisterMetric(reg, m.commitErrors); err != nil {
		return nil, err
	}
	if m.recovered, err = queue.RegisterMetric(reg, m.recovered); err != nil {
		return nil, err
	}
	if m.pruned, err = queue.RegisterMetric(reg, m.pruned); err != nil {
		return nil, err
	}
	return m, nil
}
