package config

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestEnvOverrides(t *testing.T) {
	base := []byte(`
provider: {url: "http://127.0.0.1:9100/send"}
producers: [{name: app, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1}]
`)
	cfg, err := Load(base, []string{
		"SMSGW_REDIS_ADDR=127.0.0.1:7000,127.0.0.1:7001",
		"SMSGW_LIMITS_TARGET_RPS=80",
		"SMSGW_LIMITS_CLASSES_MARKETING_BURST=3",
		"SMSGW_PROVIDER_TIMEOUT=2s",
		"SMSGW_PROVIDER_COUNT_SEGMENTS=false",
		"SMSGW_PRODUCERS=[{name: b, key: b-key-0123456789abcd, classes: [marketing], rate: 5, burst: 5}]",
		"PATH=/usr/bin",
		"SMSGW_SKIP_CLUSTER=1",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Redis.Addrs(); len(got) != 2 || got[1] != "127.0.0.1:7001" {
		t.Errorf("redis.addr = %v", got)
	}
	if cfg.Limits.TargetRPS != 80 {
		t.Errorf("target_rps = %v", cfg.Limits.TargetRPS)
	}
	if m := cfg.Limits.Classes["marketing"]; m.Burst != 3 || m.MaxRPS != 70 {
		t.Errorf("marketing = %+v, want burst 3 and max_rps kept at 70", m)
	}
	if cfg.Provider.Timeout != 2*time.Second || cfg.Provider.CountSegments {
		t.Errorf("provider = %+v", cfg.Provider)
	}
	if len(cfg.Producers) != 1 || cfg.Producers[0].Name != "b" {
		t.Errorf("producers = %+v", cfg.Producers)
	}
}

// A class's quiet hours can be set as a whole or key by key, and an
// override of another key of the class keeps them.
func TestEnvQuietHours(t *testing.T) {
	base := []byte(`
provider: {url: "http://127.0.0.1:9100/send"}
limits: {classes: {marketing: {max_rps: 60, quiet_hours: {from: "22:00", to: "07:00"}}}}
producers: [{name: app, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1}]
`)
	for _, tc := range []struct {
		env      []string
		from, to string
	}{
		{[]string{"SMSGW_LIMITS_CLASSES_MARKETING_BURST=3"}, "22:00", "07:00"},
		{[]string{"SMSGW_LIMITS_CLASSES_MARKETING_QUIET_HOURS_FROM=21:00"}, "21:00", "07:00"},
		{[]string{`SMSGW_LIMITS_CLASSES_MARKETING_QUIET_HOURS={from: "20:00", to: "09:00"}`}, "20:00", "09:00"},
	} {
		cfg, err := Load(base, tc.env)
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		m := cfg.Limits.Classes["marketing"]
		if m.QuietHours.From != tc.from || m.QuietHours.To != tc.to || m.MaxRPS != 60 {
			t.Errorf("%v: marketing = %+v, want quiet hours %s–%s and max_rps 60", tc.env, m, tc.from, tc.to)
		}
	}
}

// The adapters' Settings types keep the environment names: provider.url and
// provider.token are inlined, the vendors' keys nested under their names.
func TestEnvReachesProviderSettings(t *testing.T) {
	base := []byte(`producers: [{name: app, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1}]`)
	cfg, err := Load(base, []string{
		"SMSGW_PROVIDER_KIND=twilio",
		"SMSGW_PROVIDER_URL=https://twilio.example",
		"SMSGW_PROVIDER_TOKEN=0123",
		"SMSGW_PROVIDER_TWILIO_ACCOUNT_SID=AC0123456789abcdef0123456789abcdef",
		"SMSGW_PROVIDER_TWILIO_AUTH_TOKEN=07770123456789012345678901234567",
		"SMSGW_PROVIDER_TWILIO_MESSAGING_SERVICE_SID=MG0123456789abcdef0123456789abcdef",
		"SMSGW_PROVIDER_VONAGE={api_key: k, api_secret: s}",
		"SMSGW_PROVIDER_VONAGE_FROM=ACME",
	})
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Provider
	if p.Kind != "twilio" || p.HTTP.URL != "https://twilio.example" || p.HTTP.Token != "0123" ||
		p.Twilio.AccountSID != "AC0123456789abcdef0123456789abcdef" || p.Twilio.AuthToken != "07770123456789012345678901234567" || p.Twilio.MessagingServiceSID != "MG0123456789abcdef0123456789abcdef" ||
		p.Vonage.APIKey != "k" || p.Vonage.APISecret != "s" || p.Vonage.From != "ACME" {
		t.Fatalf("provider = %+v", p)
	}
	_, err = Load(base, []string{"SMSGW_PROVIDER_KIND=twilio", "SMSGW_PROVIDER_TWILIO_ACCOUNT_SID=AC0123456789abcdef0123456789abcdef"})
	for _, want := range []string{"provider.twilio.auth_token: must be set", "provider.twilio.from:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

// String keys take environment values verbatim: YAML would read "0123" as
// the octal 83, "1e3" as 1000 and a digest of digits as a float.
func TestEnvStringsAreNotParsedAsYAML(t *testing.T) {
	base := []byte(`
provider: {url: "http://127.0.0.1:9100/send"}
producers: [{name: app, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1}]
`)
	digest := strings.Repeat("1234567890", 6) + "1234"
	cfg, err := Load(base, []string{
		"SMSGW_REDIS_PASSWORD=0123",
		"SMSGW_ACCOUNT=1e3",
		"SMSGW_ADMIN_KEY_SHA256=" + digest,
		"SMSGW_PROVIDER_TOKEN= spaced: yes ",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Redis.Password != "0123" || cfg.Account != "1e3" || cfg.Admin.KeySHA256 != digest || cfg.Provider.HTTP.Token != " spaced: yes " {
		t.Fatalf("strings changed: password %q account %q digest %q token %q", cfg.Redis.Password, cfg.Account, cfg.Admin.KeySHA256, cfg.Provider.HTTP.Token)
	}
}

func TestEnvTypoAndBadValueNameTheVariable(t *testing.T) {
	base := []byte(`
provider: {url: "http://127.0.0.1:9100/send"}
producers: [{name: app, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1}]
`)
	_, err := Load(base, []string{"SMSGW_REDIS_ADR=x:1", "SMSGW_LIMITS_BURST=many", "SMSGW_PROVIDER_HTTP_URL=http://x"})
	if err == nil {
		t.Fatal("typo accepted")
	}
	for _, want := range []string{"SMSGW_REDIS_ADR", "limits.burst", "SMSGW_LIMITS_BURST", "SMSGW_PROVIDER_HTTP_URL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// Every key of the configuration has an environment variable, and
// testdata/good/full.yaml sets every key: the two lists are the same.
func TestEnvPathsAreEveryKey(t *testing.T) {
	cfg := Default()
	paths := map[string]reflect.Value{}
	envPaths(reflect.ValueOf(&cfg).Elem(), "", paths)
	var fromEnv []string
	for p := range paths {
		// Class entries other than the one the fixture caps.
		if strings.HasPrefix(p, "limits.classes.") && !strings.HasPrefix(p, "limits.classes.marketing") {
			continue
		}
		fromEnv = append(fromEnv, p)
	}
	slices.Sort(fromEnv)

	data, err := os.ReadFile("testdata/good/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		t.Fatal(err)
	}
	var fromFile []string
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			path := n.Content[i].Value
			if prefix != "" {
				path = prefix + "." + path
			}
			fromFile = append(fromFile, path)
			if v := n.Content[i+1]; v.Kind == yaml.MappingNode {
				walk(v, path)
			}
		}
	}
	walk(root.Content[0], "")
	slices.Sort(fromFile)
	if !slices.Equal(fromEnv, fromFile) {
		t.Fatalf("environment paths and the keys of full.yaml differ:\nenv:  %v\nfile: %v", fromEnv, fromFile)
	}
	for _, want := range []string{"provider.url", "provider.token", "provider.twilio.account_sid", "provider.vonage.api_secret"} {
		if _, ok := paths[want]; !ok {
			t.Errorf("no environment variable for %s", want)
		}
	}
}
