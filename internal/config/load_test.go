package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGoodFixturesLoad(t *testing.T) {
	files, _ := filepath.Glob("testdata/good/*.yaml")
	if len(files) == 0 {
		t.Fatal("no good fixtures")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Load(data, nil); err != nil {
				t.Fatalf("load: %v", err)
			}
		})
	}
}

// Every bad fixture's first line says "# want: <text>", the text the error
// must contain (usually the key).
func TestBadFixturesNameTheKey(t *testing.T) {
	files, _ := filepath.Glob("testdata/bad/*.yaml")
	if len(files) == 0 {
		t.Fatal("no bad fixtures")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(data), "\n")
			want, ok := strings.CutPrefix(first, "# want: ")
			if !ok {
				t.Fatalf("fixture lacks a '# want:' line")
			}
			_, err = Load(data, nil)
			if err == nil {
				t.Fatal("loaded without error")
			}
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error does not name %q:\n%v", want, err)
			}
		})
	}
}

// The defaults are the ones README's configuration table documents.
func TestDefaultsMatchREADME(t *testing.T) {
	cfg, err := Load([]byte(`
provider: {url: "http://127.0.0.1:9100/send"}
producers: [{name: app, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1}]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
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
  twilio: {account_sid: AC1, auth_token: tok, from: "+15005550006", messaging_service_sid: MG1}
  vonage: {api_key: k, api_secret: s, from: ACME}
producers: [{name: app, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1}]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Provider
	if p.HTTP.URL != "https://twilio.example" || p.HTTP.Token != "unused" ||
		p.Twilio.AccountSID != "AC1" || p.Twilio.AuthToken != "tok" || p.Twilio.From != "+15005550006" ||
		p.Twilio.MessagingServiceSID != "MG1" || p.Vonage.APIKey != "k" || p.Vonage.APISecret != "s" || p.Vonage.From != "ACME" {
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
