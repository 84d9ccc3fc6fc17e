package demo

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"smsgw/internal/sms"
)

// The printed URLs must be reachable: a wildcard listen address becomes
// localhost, a concrete one stays as it is.
func TestHostForURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"127.0.0.1:8080": "127.0.0.1:8080",
		"0.0.0.0:8080":   "localhost:8080",
		"[::]:9000":      "localhost:9000",
		":8080":          "localhost:8080",
		"[::1]:8080":     "[::1]:8080",
	} {
		if got := hostForURL(in); got != want {
			t.Errorf("hostForURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every message of a campaign goes to its own valid-looking number.
func TestPhonesAreDistinct(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for i := range 5000 {
		p := phone(i)
		if len(p) != 13 || p[:5] != "+8190" || seen[p] {
			t.Fatalf("phone(%d) = %q (seen before: %v)", i, p, seen[p])
		}
		seen[p] = true
	}
}

// The demo's producers name their senders, so its gateway does not warn
// that they may send as any sender id.
func TestDemoProducersNameTheirSenders(t *testing.T) {
	t.Parallel()
	cfg, err := demoConfig("127.0.0.1:0", t.TempDir(), "http://127.0.0.1:1/send")
	if err != nil {
		t.Fatal(err)
	}
	if open := cfg.OpenSenders(); len(open) > 0 {
		t.Errorf("producers without senders: %v", open)
	}
}

// The demo's legitimate OTPs go to valid Japanese mobiles spread over
// several number ranges, so its own traffic never raises the velocity
// alarm (protection.prefix_alarm of the demo's configuration): replayed
// through the alarm's rule, from any first OTP of a window, no prefix
// reaches the alarm's share once the window holds min_otp OTPs.
func TestDemoOTPsStayUnderTheVelocityAlarm(t *testing.T) {
	t.Parallel()
	cfg, err := demoConfig("127.0.0.1:0", t.TempDir(), "http://127.0.0.1:1/send")
	if err != nil {
		t.Fatal(err)
	}
	alarm := cfg.Protection.PrefixAlarm
	// The numbers in the order traffic.otp posts them: one request in
	// five is a pumping attempt, refused before the alarm counts it.
	var legit []string
	seen := map[string]bool{}
	for n := 1; len(legit) < 3000; n++ {
		if n%5 == 0 {
			continue
		}
		p := otpPhone(n)
		if d := sms.DestinationOf(p); d.Region != "JP" || d.Type != sms.NumberMobile || seen[p] {
			t.Fatalf("otpPhone(%d) = %q: %+v (seen before: %v)", n, p, d, seen[p])
		}
		seen[p] = true
		legit = append(legit, p)
	}
	for start := range 100 {
		counts := map[string]int{}
		for total, p := range legit[start:] {
			prefix := sms.NumberPrefix(p, alarm.Digits)
			counts[prefix]++
			if share := float64(counts[prefix]) / float64(total+1); total+1 >= alarm.MinOTP && share >= alarm.Share {
				t.Fatalf("window from OTP %d: range %s takes %.2f of %d OTPs (alarm at %.2f)", start, prefix, share, total+1, alarm.Share)
			}
		}
	}
}

// The demo's logger writes a duration as "30s", like smsgw serve's, not
// as nanoseconds.
func TestDemoLoggerWritesDurations(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	demoLogger(&buf, false).Warn("x", "lease", 30*time.Second)
	if s := buf.String(); !strings.Contains(s, "lease=30s") || strings.Contains(s, "30000000000") {
		t.Errorf("logged %q", s)
	}
}
