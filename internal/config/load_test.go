package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// eachFixture runs check, as a subtest named after the file, on every
// fixture of testdata/dir; it fails when there is none.
func eachFixture(t *testing.T, dir string, check func(t *testing.T, data []byte)) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join("testdata", dir, "*.yaml"))
	if len(files) == 0 {
		t.Fatalf("no %s fixtures", dir)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			check(t, data)
		})
	}
}

func TestGoodFixturesLoad(t *testing.T) {
	eachFixture(t, "good", func(t *testing.T, data []byte) {
		if _, err := Load(data, nil); err != nil {
			t.Fatalf("load: %v", err)
		}
	})
}

// Every bad fixture's first line says "# want: <text>", the text the error
// must contain (usually the key).
func TestBadFixturesNameTheKey(t *testing.T) {
	eachFixture(t, "bad", func(t *testing.T, data []byte) {
		first, _, _ := strings.Cut(string(data), "\n")
		want, ok := strings.CutPrefix(first, "# want: ")
		if !ok {
			t.Fatalf("fixture lacks a '# want:' line")
		}
		_, err := Load(data, nil)
		if err == nil {
			t.Fatal("loaded without error")
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error does not name %q:\n%v", want, err)
		}
	})
}

// The defaults are the ones docs/configuration.md documents.
func TestDefaultsMatchREADME(t *testing.T) {
	cfg := valid(t) // only the keys without a default
	if cfg.Provider.ContractRPS != 100 || cfg.Limits.TargetRPS != 90 || cfg.Limits.Burst != 5 ||
		cfg.Limits.MaxSenders != 23 || cfg.Limits.Classes["marketing"].MaxRPS != 70 ||
		cfg.Listen != ":8080" || cfg.Account != "main" || cfg.Provider.Kind != "http" ||
		!cfg.Provider.CountSegments || cfg.Redis.Enabled() {
		t.Fatalf("defaults differ from README's configuration table: %+v", cfg)
	}
}

// The adapters' settings keep their YAML keys: provider.url and
// provider.token sit directly under provider, each vendor's under its name.
func TestProviderSettingsKeepTheirKeys(t *testing.T) {
	cfg, err := Load([]byte(`
provider:
  kind: twilio
  url: "https://twilio.example"
  token: "unused"
  twilio: {account_sid: AC11111111111111111111111111111111, auth_token: tok-0123456789abcdef, from: "+15005550006", messaging_service_sid: MG0123456789abcdef0123456789abcdef}
  vonage: {api_key: k, api_secret: s, from: ACME}
producers: [{name: app, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1}]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Provider
	if p.HTTP.URL != "https://twilio.example" || p.HTTP.Token != "unused" ||
		p.Twilio.AccountSID != "AC11111111111111111111111111111111" || p.Twilio.AuthToken != "tok-0123456789abcdef" || p.Twilio.From != "+15005550006" ||
		p.Twilio.MessagingServiceSID != "MG0123456789abcdef0123456789abcdef" || p.Vonage.APIKey != "k" || p.Vonage.APISecret != "s" || p.Vonage.From != "ACME" {
		t.Fatalf("provider = %+v", p)
	}
}

func TestYAMLErrorsNameTheKey(t *testing.T) {
	_, err := Load([]byte(`
provider: {url: "http://127.0.0.1:9100/send", timeout: fast}
dispatch:
  workers: many
producers: [{name: app, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1}]
`), nil)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"provider.timeout (line 2)", "dispatch.workers (line 4)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	var ce *Error
	if !errors.As(err, &ce) || len(ce.Problems) != 2 {
		t.Errorf("want the two keys as two problems of one list: %v", err)
	}
}

// TestAllProblemsAtOnce: a wrong key in the file, a value of the wrong
// type, an environment variable naming no key, a bad environment value and
// a rule validation checks are reported together, each naming its key (an
// operator fixed them one run at a time before). A file that is not YAML
// still stops at that.
func TestAllProblemsAtOnce(t *testing.T) {
	_, err := Load([]byte(`
provider: {url: "http://127.0.0.1:9100/send", contract_rsp: 100}
limits: {target_rps: 98}
dispatch: {workers: many}
producers: [{name: app, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1}]
`), []string{"SMSGW_REDIS_ADR=x", "SMSGW_DISPATCH_LEASE=30"})
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("want one list of problems, got %v", err)
	}
	for _, want := range []string{"provider.contract_rsp (line 2)", "dispatch.workers (line 4)", "SMSGW_REDIS_ADR",
		"dispatch.lease (from SMSGW_DISPATCH_LEASE)", "limits.burst"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the list lacks %q:\n%v", want, err)
		}
	}
	if _, err := Load([]byte("provider: [unclosed"), nil); err == nil || errors.As(err, &ce) {
		t.Errorf("a file that is not YAML: %v, want that error alone", err)
	}
}

// TestFractionInIntegerKeyRefused: the YAML decoder truncates a number with
// a fraction given to an integer key (workers: 2.7 ran 2 workers); the file
// and the environment both get a problem naming the key instead. A whole
// number written as a float (8.0, 1e3) is that number. An environment
// value's problems cite no line: the document they came from is ours.
func TestFractionInIntegerKeyRefused(t *testing.T) {
	_, err := Load([]byte(`
producers: [{name: app, key: "app-key-0123456789ab", classes: [otp], rate: 1.5, burst: 2.5}]
dispatch: {workers: 2.7, max_attempts: 8.0}
limits: {burst: 5.5}
`), []string{"SMSGW_DISPATCH_POISON_AFTER=3.5", "SMSGW_MESSAGES_MAX_SEGMENTS=ten"})
	if err == nil {
		t.Fatal("fractions in integer keys accepted")
	}
	for _, want := range []string{
		"producers[0].burst (line 2): must be a whole number (got 2.5)",
		"dispatch.workers (line 3): must be a whole number (got 2.7)",
		"limits.burst (line 4): must be a whole number (got 5.5)",
		"dispatch.poison_after (from SMSGW_DISPATCH_POISON_AFTER): must be a whole number (got 3.5)",
		"messages.max_segments (from SMSGW_MESSAGES_MAX_SEGMENTS): cannot unmarshal !!str `ten` into int",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the list lacks %q:\n%v", want, err)
		}
	}
	for _, wrong := range []string{"max_attempts", "rate", "line 1:"} {
		if strings.Contains(err.Error(), wrong) {
			t.Errorf("the list names %q:\n%v", wrong, err)
		}
	}
	cfg, err := Load([]byte(`
provider: {url: "http://127.0.0.1:9100/send"}
producers: [{name: app, key: "app-key-0123456789ab", classes: [otp], rate: 1.5, burst: 2}]
dispatch: {workers: 1e1, max_attempts: 8.0}
`), []string{"SMSGW_DISPATCH_POISON_AFTER=4.0"})
	if err != nil {
		t.Fatalf("whole numbers written as floats: %v", err)
	}
	if d := cfg.Dispatch; d.Workers != 10 || d.MaxAttempts != 8 || d.PoisonAfter != 4 {
		t.Errorf("workers %d, max_attempts %d, poison_after %d; want 10, 8, 4", d.Workers, d.MaxAttempts, d.PoisonAfter)
	}
}

// TestSendersSameNumberTwice: a producer's senders naming one E.164
// number twice, written two ways, is a duplicate.
func TestSendersSameNumberTwice(t *testing.T) {
	_, err := Load([]byte(`
provider: {url: "http://127.0.0.1:9100/send"}
producers: [{name: app, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1, senders: ["+4402079460000", "+442079460000", "ACME"]}]
`), nil)
	if err == nil || !strings.Contains(err.Error(), ".senders[1]: duplicate sender") {
		t.Fatalf("got %v, want senders[1] a duplicate", err)
	}
}
