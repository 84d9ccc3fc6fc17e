package config

import "testing"

// TestProtectionSummary: check-config's line says what is refused.
func TestProtectionSummary(t *testing.T) {
	t.Parallel()
	if got, want := Default().Protection.Summary(),
		"all regions; blocked premium_rate, shared_cost; OTPs per number unlimited; suppression list for transactional and marketing"; got != want {
		t.Errorf("default: %q, want %q", got, want)
	}
	p := Default().Protection
	p.Countries, p.BlockNumberTypes, p.SuppressOTP = []string{"JP", "US"}, nil, true
	p.OTPPerNumber.Limit = 5
	if got, want := p.Summary(),
		"regions JP, US; no number type blocked; at most 5 OTPs per number per 1h0m0s; suppression list for every class"; got != want {
		t.Errorf("set: %q, want %q", got, want)
	}
}
