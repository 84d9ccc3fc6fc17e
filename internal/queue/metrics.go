package queue

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetric registers c with reg for a backend. A queue reopened on the
// same registry (a restart inside one process, a second queue in a test)
// gets back the collector registered first, so both count into one series
// instead of failing to start.
func RegisterMetric[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}
