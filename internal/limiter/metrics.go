package limiter

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of a Shared limiter; label values come from closed sets.
type metrics struct {
	mode      *prometheus.GaugeVec
	decisions *prometheus.CounterVec
}

var (
	allModes   = []Mode{ModeShared, ModeFallback}
	allResults = []string{"allowed", "denied", "paused"}
)

func newMetrics(reg prometheus.Registerer, s *Shared) (*metrics, error) {
	m := &metrics{
		mode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "smsgw_limiter_mode",
			Help: "1 for the mode the limiter decides in (shared: Redis; fallback: local at target/max_senders), 0 otherwise.",
		}, []string{"mode"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "smsgw_limiter_decisions_total",
			Help: "Limiter decisions by mode and result.",
		}, []string{"mode", "result"}),
	}
	pause := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "smsgw_limiter_pause_remaining_seconds",
		Help: "How long the shared pause (provider throttling) still holds, as this process knows it.",
	}, func() float64 { return s.fallback.pauseRemaining().Seconds() })
	skew := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "smsgw_limiter_clock_skew_seconds",
		Help: "This process's clock minus Redis time at the last limiter answer; decisions never use the local clock.",
	}, func() float64 { return s.redis.ClockSkew().Seconds() })
	for _, c := range []prometheus.Collector{m.mode, m.decisions, pause, skew} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("limiter: register metrics: %w", err)
		}
	}
	for _, mode := range allModes {
		for _, r := range allResults {
			m.decisions.WithLabelValues(string(mode), r)
		}
	}
	m.setMode(ModeShared)
	return m, nil
}

func (m *metrics) setMode(cur Mode) { setModeGauge(m.mode, cur) }

func (m *metrics) count(d Decision) {
	result := "denied"
	switch {
	case d.Allowed:
		result = "allowed"
	case d.Paused:
		result = "paused"
	}
	m.decisions.WithLabelValues(string(d.Mode), result).Inc()
}
