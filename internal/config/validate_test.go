package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"smsgw/internal/sms"
)

// valid is a configuration Validate accepts; tests change one key of it.
func valid(t *testing.T) Config {
	t.Helper()
	cfg, err := Load([]byte(`
provider: {url: "http://127.0.0.1:9100/send"}
producers: [{name: app, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1}]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestValidateJoinsEveryProblem(t *testing.T) {
	_, err := Load([]byte(`
listen: "nope"
provider: {kind: carrier-pigeon, timeout: -1s}
limits: {target_rps: 0, burst: 0, max_senders: 0}
producers: [{name: "", key: short, classes: [], rate: 0, burst: 0}]
log: {level: loud}
`), nil)
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("want *Error, got %v", err)
	}
	for _, key := range []string{"listen", "provider.kind", "provider.timeout", "limits.target_rps",
		"limits.burst", "limits.max_senders", ".name", ".key", ".classes", ".rate", ".burst", "log.level"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not name %s:\n%v", key, err)
		}
	}
	if len(ce.Problems) < 12 {
		t.Errorf("only %d problems reported", len(ce.Problems))
	}
}

// An adapter's settings problems are reported one per key, like the
// configuration's own, under the adapter's key path.
func TestProviderSettingsProblemsArePerKey(t *testing.T) {
	cfg := valid(t)
	cfg.Provider.Kind = "twilio"
	err := cfg.Validate()
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("want *Error, got %v", err)
	}
	var got []string
	for _, p := range ce.Problems {
		k, _, _ := strings.Cut(p.Error(), ": ")
		got = append(got, k)
	}
	want := []string{"provider.twilio.account_sid", "provider.twilio.auth_token", "provider.twilio.from"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("problems name %v, want %v", got, want)
	}
}

// http.write_timeout must outlast the longest OTP request: the deadline a
// request may ask for (5 s) plus the headroom around the send.
func TestWriteTimeoutOutlastsTheLongestOTP(t *testing.T) {
	for _, tc := range []struct {
		write time.Duration
		ok    bool
	}{
		{0, false},
		{5 * time.Second, false},
		{MaxOTPDeadline + otpReplyHeadroom, false},
		{MaxOTPDeadline + otpReplyHeadroom + time.Millisecond, true},
		{30 * time.Second, true},
	} {
		cfg := valid(t)
		cfg.HTTP.WriteTimeout = tc.write
		err := cfg.Validate()
		if tc.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "http.write_timeout")) {
			t.Errorf("write_timeout %s: %v", tc.write, err)
		}
	}
}

// Retention shorter than the idempotency window is refused in both modes:
// the embedded store refuses it at start-up, and Redis would end replays
// early.
func TestRetentionCoversTheIdempotencyWindow(t *testing.T) {
	for _, redis := range []string{"", "127.0.0.1:6379"} {
		for _, tc := range []struct {
			retention time.Duration
			ok        bool
		}{{time.Hour, false}, {IdempotencyWindow - time.Second, false}, {IdempotencyWindow, true}} {
			cfg := valid(t)
			cfg.Redis.Addr = redis
			cfg.Messages.Retention = tc.retention
			if err := cfg.Validate(); tc.ok != (err == nil) {
				t.Errorf("redis %q, retention %s: %v", redis, tc.retention, err)
			}
		}
	}
}

func TestKeySHA256MatchesClearKey(t *testing.T) {
	clear := Producer{Key: "test"}
	hashed := Producer{KeySHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
	if clear.KeyHash() != hashed.KeyHash() {
		t.Fatal("sha256 of 'test' does not match the configured hash")
	}
}

// Quiet hours: marketing only, two HH:MM times that differ; the policy the
// gateway and the dispatcher share is built from them.
func TestQuietHours(t *testing.T) {
	for _, tc := range []struct {
		class, from, to string
		want            string // "" valid, else a key the error names
	}{
		{"marketing", "21:00", "08:00", ""},
		{"marketing", "12:00", "14:00", ""},
		{"marketing", "21:00", "", "limits.classes.marketing.quiet_hours.to"},
		{"marketing", "9pm", "08:00", "limits.classes.marketing.quiet_hours.from"},
		{"marketing", "08:00", "08:00", "limits.classes.marketing.quiet_hours: from and to are equal"},
		{"transactional", "21:00", "08:00", "limits.classes.transactional.quiet_hours: only marketing"},
	} {
		cfg := valid(t)
		cfg.Limits.Classes[tc.class] = ClassLimits{MaxRPS: 60, QuietHours: QuietHoursConfig{From: tc.from, To: tc.to}}
		err := cfg.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s %s–%s: %v", tc.class, tc.from, tc.to, err)
				continue
			}
			q := cfg.QuietPolicy()[sms.ClassMarketing]
			if q.From.String() != tc.from || q.To.String() != tc.to {
				t.Errorf("policy %+v, want %s–%s", q, tc.from, tc.to)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s–%s: %v, want an error naming %s", tc.class, tc.from, tc.to, err, tc.want)
		}
	}
	if p := valid(t).QuietPolicy(); len(p) != 0 {
		t.Errorf("quiet hours by default: %v", p)
	}
}
