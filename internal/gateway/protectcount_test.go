package gateway

import (
	"net/http"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/provider/sim"
)

const keyTrickle = "trickle-key-0123456789" // otp, one request and then almost no quota

// TestOTPRefusedNotCounted: protection.otp_per_number counts only the OTPs
// the gateway let through, and each producer has its own count for a
// number. A producer refused by its ingress quota (on the fast path, the
// queued path and in a batch) leaves nothing counted against the number,
// and whatever one producer sends to a number, another producer still has
// its whole limit for it (an audit once used one producer's refused
// requests to lock a number out for every other); the limit itself holds.
func TestOTPRefusedNotCounted(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			s := newSim(t, sim.Config{})
			cfg := testConfig(t, m, s.URL())
			cfg.Producers = append(cfg.Producers,
				config.Producer{Name: "trickle", Key: keyTrickle, Classes: []string{"otp"}, Rate: 0.0001, Burst: 1})
			cfg.Protection.OTPPerNumber = config.OTPPerNumberConfig{Limit: 2, Window: time.Hour}
			h := startWith(t, cfg, s)
			const to = "+819055500001"

			wantStatus(t, h.post("/v1/otp", keyTrickle, otpBody("to", to)), http.StatusOK) // 1 of 2
			for range 4 {
				wantProblem(t, h.post("/v1/otp", keyTrickle, otpBody("to", to)), http.StatusTooManyRequests, httpapi.KindRateLimited, "")
				wantProblem(t, h.post("/v1/messages", keyTrickle, msg("otp", "to", to)), http.StatusTooManyRequests, httpapi.KindRateLimited, "")
			}
			wantProblem(t, h.post("/v1/messages/batch", keyTrickle, map[string]any{"messages": []any{msg("otp", "to", to), msg("otp", "to", to)}}),
				http.StatusTooManyRequests, httpapi.KindRateLimited, "")

			// another producer has its whole limit for the number, and no third
			for range 2 {
				wantStatus(t, h.post("/v1/otp", keyLogin, otpBody("to", to)), http.StatusOK)
			}
			wantProblem(t, h.post("/v1/otp", keyLogin, otpBody("to", to)), http.StatusTooManyRequests, httpapi.KindOTPNumberLimited, "")
			wantProblem(t, h.post("/v1/messages", keyLogin, msg("otp", "to", to)), http.StatusTooManyRequests, httpapi.KindOTPNumberLimited, "")
			if n := len(s.Accepted()); n != 3 {
				t.Errorf("the provider received %d OTPs, want 3", n)
			}
		})
	}
}
