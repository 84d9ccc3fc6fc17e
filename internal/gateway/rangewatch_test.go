package gateway

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
)

// pumpingRanges are three number ranges of three countries an ordinary
// Japanese login traffic never reaches (Latvia, Estonia, Lithuania
// mobiles), for sequential numbers: the pattern of an SMS pumping run.
var pumpingRanges = []struct{ region, prefix string }{
	{"LV", "+371212"}, {"EE", "+372512"}, {"LT", "+370612"},
}

func pumpingNumber(i int) string {
	r := pumpingRanges[i%len(pumpingRanges)]
	return fmt.Sprintf("%s%05d", r.prefix, i/len(pumpingRanges))
}

// TestPumpingSequentialRanges: 60 OTPs to sequential numbers in three
// unusual ranges, none taking the alarm's share. With the regions the
// producers serve set (the chart now requires protection.countries), none
// is sent; with every region allowed they are sent, but the metrics the
// alerts read show them: three ranges in the window, and OTPs by region
// for the new-country alert (deploy/prometheus/alerts.yaml).
func TestPumpingSequentialRanges(t *testing.T) {
	t.Parallel()
	t.Run("countries set", func(t *testing.T) {
		t.Parallel()
		h := start(t, embeddedMode, func(c *config.Config) {
			c.Protection = config.Default().Protection
			c.Protection.Countries = []string{"JP"}
		})
		for i := range 60 {
			wantProblem(t, h.post("/v1/otp", keyLogin, otpBody("to", pumpingNumber(i), "deadline_ms", 5000)), http.StatusUnprocessableEntity, httpapi.KindDestinationNotAllowed, "to")
		}
		if n := len(h.sim.Accepted()); n != 0 {
			t.Fatalf("the provider received %d pumping OTPs", n)
		}
	})
	t.Run("every region", func(t *testing.T) {
		t.Parallel()
		h := start(t, embeddedMode, func(c *config.Config) {
			c.Protection = config.Default().Protection
			c.Protection.PrefixAlarm.Window = time.Hour // the run, however slow, stays in one window
		})
		for i := range 60 {
			wantStatus(t, h.post("/v1/otp", keyLogin, otpBody("to", pumpingNumber(i), "deadline_ms", 5000)), http.StatusOK)
		}
		mv := metricValues(h.metrics(), "smsgw_protection_otp_ranges", "smsgw_protection_otps_total")
		if mv["smsgw_protection_otp_ranges"] != 3 {
			t.Errorf("ranges %v, want 3", mv)
		}
		for _, r := range pumpingRanges {
			if got := mv[`smsgw_protection_otps_total{region="`+r.region+`"}`]; got != 20 {
				t.Errorf("OTPs to %s: %v, want 20 (%v)", r.region, got, mv)
			}
		}
	})
}

// TestRangeHold: with protection.prefix_alarm.hold, the range that raised
// the velocity alarm is refused (429 range-held with Retry-After, counted
// as range_held) while other ranges still send; without it (the default)
// the alarm only alarms.
func TestRangeHold(t *testing.T) {
	t.Parallel()
	for _, hold := range []time.Duration{0, time.Hour} {
		t.Run("hold "+hold.String(), func(t *testing.T) {
			t.Parallel()
			h := start(t, embeddedMode, func(c *config.Config) {
				c.Protection.PrefixAlarm = config.PrefixAlarmConfig{Window: time.Hour, Share: 0.6, MinOTP: 10, Digits: 5, Hold: hold}
			})
			for i := range 4 {
				wantStatus(t, h.post("/v1/otp", keyLogin, otpBody("to", fmt.Sprintf("+44791234%04d", i), "deadline_ms", 5000)), http.StatusOK)
			}
			// The sixth OTP to the range makes 10 in the window, 60% of
			// them in one range: the alarm fires (and the hold starts).
			for i := range 6 {
				wantStatus(t, h.post("/v1/otp", keyLogin, otpBody("to", fmt.Sprintf("+81901234%04d", i), "deadline_ms", 5000)), http.StatusOK)
			}
			next := h.post("/v1/otp", keyLogin, otpBody("to", "+819012349999", "deadline_ms", 5000))
			if hold == 0 {
				wantStatus(t, next, http.StatusOK)
				return
			}
			p := wantProblem(t, next, http.StatusTooManyRequests, httpapi.KindRangeHeld, "")
			ra, err := strconv.Atoi(next.header.Get("Retry-After"))
			if err != nil || ra < 3000 || ra > 3600 {
				t.Errorf("Retry-After %q, want the hold's rest (about 3600 s)", next.header.Get("Retry-After"))
			}
			if p["detail"] == nil || p["hold_seconds"] == nil {
				t.Errorf("problem %v", p)
			}
			wantStatus(t, h.post("/v1/otp", keyLogin, otpBody("to", "+447912349999", "deadline_ms", 5000)), http.StatusOK)
			if got := h.stats().Protection.Refused["range_held"]; got != 1 {
				t.Errorf("refused range_held %d, want 1", got)
			}
			mv := metricValues(h.metrics(), "smsgw_protection_ranges_held")
			if mv["smsgw_protection_ranges_held"] != 1 {
				t.Errorf("ranges held %v, want 1", mv)
			}
		})
	}
}
