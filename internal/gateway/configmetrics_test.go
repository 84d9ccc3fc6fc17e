package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"smsgw/internal/config"
)

// metricValues picks the samples of the named metrics (name{labels} →
// value) out of a Prometheus text exposition.
func metricValues(text string, names ...string) map[string]float64 {
	out := map[string]float64{}
	for _, l := range strings.Split(text, "\n") {
		series, rest, ok := strings.Cut(l, " ")
		if !ok || strings.HasPrefix(l, "#") {
			continue
		}
		name, _, _ := strings.Cut(series, "{")
		for _, n := range names {
			if n == name {
				if v, err := strconv.ParseFloat(rest, 64); err == nil {
					out[series] = v
				}
			}
		}
	}
	return out
}

// TestConfigMetrics: the configured limits are on /metrics as configured
// (not the defaults), and smsgw_admin_paused follows the operator pause.
func TestConfigMetrics(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, func(c *config.Config) {
				c.Provider.ContractRPS = 120
				c.Limits.TargetRPS = 80
				c.Limits.Classes = map[string]config.ClassLimits{"marketing": {MaxRPS: 50}, "transactional": {MaxRPS: 60}}
				c.Dispatch.SuspensionGuard.Threshold = 200
				c.Messages.OTPDeadline = 2 * time.Second
				c.Messages.DefaultTTL = time.Hour
			})
			scrape := func() map[string]float64 {
				return metricValues(string(h.get("/metrics", "").body), "smsgw_config_contract_rate_per_second",
					"smsgw_config_target_rate_per_second", "smsgw_config_class_max_rate_per_second",
					"smsgw_config_suspension_threshold_throttles", "smsgw_config_otp_deadline_seconds",
					"smsgw_config_default_ttl_seconds", "smsgw_admin_paused")
			}
			want := map[string]float64{
				"smsgw_config_contract_rate_per_second":                         120,
				"smsgw_config_target_rate_per_second":                           80,
				`smsgw_config_class_max_rate_per_second{class="marketing"}`:     50,
				`smsgw_config_class_max_rate_per_second{class="transactional"}`: 60,
				`smsgw_config_class_max_rate_per_second{class="otp"}`:           80, // uncapped: the target
				"smsgw_config_suspension_threshold_throttles":                   200,
				"smsgw_config_otp_deadline_seconds":                             2,
				"smsgw_config_default_ttl_seconds":                              3600,
				"smsgw_admin_paused":                                            0,
			}
			got := scrape()
			for k, v := range want {
				if g, ok := got[k]; !ok || g != v {
					t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
				}
			}
			if len(got) != len(want) {
				t.Errorf("series %v, want exactly %d", got, len(want))
			}
			wantStatus(t, h.post("/v1/admin/pause", keyAdmin, nil), http.StatusOK)
			if v := scrape()["smsgw_admin_paused"]; v != 1 {
				t.Errorf("smsgw_admin_paused = %v while paused", v)
			}
			wantStatus(t, h.post("/v1/admin/resume", keyAdmin, nil), http.StatusOK)
			if v := scrape()["smsgw_admin_paused"]; v != 0 {
				t.Errorf("smsgw_admin_paused = %v after resume", v)
			}
		})
	}
}
