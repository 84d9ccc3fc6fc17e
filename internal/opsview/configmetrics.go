package opsview

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/metricdef"
	"smsgw/internal/sms"
)

// RegisterConfigMetrics exports the configured limits that alert rules and
// the Grafana dashboard compare live figures with, so one rule follows each
// deployment's own contract, target, caps, suspension threshold, OTP
// deadline and TTL; and whether the operator pause holds, so that "nothing
// is sent" alerts stay quiet while an operator stopped sending on purpose.
func RegisterConfigMetrics(reg prometheus.Registerer, cfg config.Config, pause *admission.OperatorPause) error {
	gauge := func(name, help string, v float64) prometheus.Collector {
		g := metricdef.Gauge(name, help)
		g.Set(v)
		return g
	}
	caps := metricdef.GaugeVec("smsgw_config_class_max_rate_per_second", "limits.classes.<class>.max_rps, or limits.target_rps for a class without a cap.", "class")
	for _, c := range sms.Classes {
		v := cfg.Limits.TargetRPS
		if cl, ok := cfg.Limits.Classes[c.String()]; ok && cl.MaxRPS > 0 {
			v = cl.MaxRPS
		}
		caps.WithLabelValues(c.String()).Set(v)
	}
	paused := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "smsgw_admin_paused",
		Help: "1 while an operator pause (POST /v1/admin/pause) holds, as this replica last read it.",
	}, func() float64 {
		if pause.State().Paused {
			return 1
		}
		return 0
	})
	// One series per class and per configured producer: bounded by the
	// configuration.
	held := func(name, help, label, value string, match func(admission.ScopeState) bool) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: prometheus.Labels{label: value}},
			func() float64 {
				if slices.ContainsFunc(pause.HeldScopes(), match) {
					return 1
				}
				return 0
			})
	}
	classPaused := make([]prometheus.Collector, 0, len(sms.Classes)+len(cfg.Producers))
	for _, c := range sms.Classes {
		classPaused = append(classPaused, held("smsgw_admin_paused_class",
			"1 while an operator pause of this class (POST /v1/admin/pause with a class) holds, as this replica last read it.",
			"class", c.String(), func(s admission.ScopeState) bool { return s.Class == c.String() }))
	}
	for _, p := range cfg.Producers {
		classPaused = append(classPaused, held("smsgw_admin_paused_producer",
			"1 while an operator pause of this producer (POST /v1/admin/pause with a producer) holds, as this replica last read it.",
			"producer", p.Name, func(s admission.ScopeState) bool { return s.Producer == p.Name }))
	}
	if err := metricdef.Register(reg, append([]prometheus.Collector{
		gauge("smsgw_config_contract_rate_per_second", "provider.contract_rps: the provider's hard limit.", cfg.Provider.ContractRPS),
		gauge("smsgw_config_target_rate_per_second", "limits.target_rps: the rate smsgw paces every replica together to.", cfg.Limits.TargetRPS),
		caps,
		gauge("smsgw_config_suspension_threshold_throttles",
			"dispatch.suspension_guard.threshold: provider 429s within the window after which the provider suspends the account.",
			float64(cfg.Dispatch.SuspensionGuard.Threshold)),
		gauge("smsgw_config_otp_deadline_seconds", "messages.otp_deadline: how long POST /v1/otp tries by default.",
			cfg.Messages.OTPDeadline.Seconds()),
		gauge("smsgw_config_default_ttl_seconds", "messages.default_ttl: the TTL of a message whose producer sets none (0: none).",
			cfg.Messages.DefaultTTL.Seconds()),
		paused,
	}, classPaused...)...); err != nil {
		return err
	}
	return nil
}
