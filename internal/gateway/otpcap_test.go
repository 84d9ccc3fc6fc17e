package gateway

import (
	"net/http"
	"strings"
	"testing"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
)

const keyLogin2 = "login2-key-0123456789" // a second producer of OTPs

// TestOTPCapIsPerProducer: protection.otp_per_number counts each producer's
// OTPs to a number apart. One producer that uses up a number's allowance
// gets 429 otp-number-limited for it; another producer still reaches that
// number (one producer, or a leaked key, cannot lock a number out for every
// other producer), and its own allowance is counted as the first's was.
// Both stores, through HTTP.
func TestOTPCapIsPerProducer(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, func(c *config.Config) {
				c.Protection.OTPPerNumber.Limit = 2
				c.Producers = append(c.Producers, config.Producer{Name: "login2", Key: keyLogin2,
					Classes: []string{"otp"}, Rate: 50, Burst: 100})
			})
			const to = "+819055500001"
			for range 2 {
				wantStatus(t, h.post("/v1/otp", keyLogin, otpBody("to", to, "deadline_ms", 5000)), http.StatusOK)
			}
			p := wantProblem(t, h.post("/v1/otp", keyLogin, otpBody("to", to, "deadline_ms", 5000)), http.StatusTooManyRequests, httpapi.KindOTPNumberLimited, "")
			if d, _ := p["detail"].(string); !strings.Contains(d, "from one producer") {
				t.Errorf("detail %q does not say the limit is per producer", d)
			}
			for range 2 {
				wantStatus(t, h.post("/v1/otp", keyLogin2, otpBody("to", to, "deadline_ms", 5000)), http.StatusOK)
			}
			wantProblem(t, h.post("/v1/otp", keyLogin2, otpBody("to", to, "deadline_ms", 5000)), http.StatusTooManyRequests, httpapi.KindOTPNumberLimited, "")
			eventually(t, "four OTPs at the provider", func() bool { return len(h.sim.Accepted()) == 4 })
		})
	}
}

// TestOTPCapOnByDefault: with the shipped defaults an OTP flood to one
// number stops at protection.otp_per_number's default.
func TestOTPCapOnByDefault(t *testing.T) {
	t.Parallel()
	h := start(t, embeddedMode, func(c *config.Config) {
		c.Protection.OTPPerNumber = config.Default().Protection.OTPPerNumber
	})
	if config.DefaultOTPPerNumber < 1 {
		t.Fatal("the per-number OTP cap is off by default")
	}
	const to = "+819055500002"
	codes := map[int]int{}
	for range config.DefaultOTPPerNumber + 5 {
		codes[h.post("/v1/otp", keyLogin, otpBody("to", to, "deadline_ms", 5000)).status]++
	}
	if codes[http.StatusOK] != config.DefaultOTPPerNumber || codes[http.StatusTooManyRequests] != 5 {
		t.Fatalf("answers %v, want %d × 200 and 5 × 429", codes, config.DefaultOTPPerNumber)
	}
}
