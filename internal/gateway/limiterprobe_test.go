package gateway

import (
	"net/http"
	"testing"

	"smsgw/internal/redistest"
)

// TestIdleReplicaLeavesFallback: after a Redis outage, a replica with
// nothing to send and no producer posting goes back to the shared
// schedule once Redis answers, and its mode gauges say so. Before the
// probe both limiters stayed in fallback (smsgw_limiter_mode and
// smsgw_limiter_ingress_mode, so SmsgwLimiterFallback kept firing) until
// the next decision: 40 s after Redis was back, still fallback.
func TestIdleReplicaLeavesFallback(t *testing.T) {
	h, srv := startOwnRedis(t, redistest.ServerOptions{})
	wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
	modes := func() map[string]float64 {
		return metricValues(string(h.get("/metrics", "").body), "smsgw_limiter_mode", "smsgw_limiter_ingress_mode")
	}
	inMode := func(mode string) func() bool {
		return func() bool {
			m := modes()
			return m[`smsgw_limiter_mode{mode="`+mode+`"}`] == 1 && m[`smsgw_limiter_ingress_mode{mode="`+mode+`"}`] == 1
		}
	}
	srv.Stop()
	// Decisions while Redis is down send both limiters to their fallback.
	h.post("/v1/otp", keyLogin, otpBody())
	eventually(t, "both limiters in fallback while Redis is down", inMode("fallback"))
	srv.Start()
	// No request from here on: only the probe can tell them Redis is back.
	eventually(t, "both limiters back on the shared schedule with no traffic", inMode("shared"))
}
