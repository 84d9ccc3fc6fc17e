package config

import (
	"errors"
	"strings"
	"testing"
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

func TestKeySHA256MatchesClearKey(t *testing.T) {
	clear := Producer{Key: "test"}
	hashed := Producer{KeySHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
	if clear.KeyHash() != hashed.KeyHash() {
		t.Fatal("sha256 of 'test' does not match the configured hash")
	}
}
