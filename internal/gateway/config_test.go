package gateway

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestGoodConfigFixturesLoad(t *testing.T) {
	files, _ := filepath.Glob("testdata/config/good/*.yaml")
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
func TestBadConfigFixturesNameTheKey(t *testing.T) {
	files, _ := filepath.Glob("testdata/config/bad/*.yaml")
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

func TestDefaultsMatchDesign(t *testing.T) {
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
		t.Fatalf("defaults differ from docs/design.md section 7.3: %+v", cfg)
	}
}

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
	if cfg.Redis.Password != "0123" || cfg.Account != "1e3" || cfg.Admin.KeySHA256 != digest || cfg.Provider.Token != " spaced: yes " {
		t.Fatalf("strings changed: password %q account %q digest %q token %q", cfg.Redis.Password, cfg.Account, cfg.Admin.KeySHA256, cfg.Provider.Token)
	}
}

func TestEnvTypoAndBadValueNameTheVariable(t *testing.T) {
	base := []byte(`
provider: {url: "http://127.0.0.1:9100/send"}
producers: [{name: app, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1}]
`)
	_, err := Load(base, []string{"SMSGW_REDIS_ADR=x:1", "SMSGW_LIMITS_BURST=many"})
	if err == nil {
		t.Fatal("typo accepted")
	}
	for _, want := range []string{"SMSGW_REDIS_ADR", "limits.burst", "SMSGW_LIMITS_BURST"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestValidateJoinsEveryProblem(t *testing.T) {
	_, err := Load([]byte(`
listen: "nope"
provider: {kind: carrier-pigeon, timeout: -1s}
limits: {target_rps: 0, burst: 0, max_senders: 0}
producers: [{name: "", key: short, classes: [], rate: 0, burst: 0}]
log: {level: loud}
`), nil)
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("want *ConfigError, got %v", err)
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

func TestKeySHA256MatchesClearKey(t *testing.T) {
	clear := Producer{Key: "test"}
	hashed := Producer{KeySHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
	if clear.KeyHash() != hashed.KeyHash() {
		t.Fatal("sha256 of 'test' does not match the configured hash")
	}
}

// FuzzLoad: no input makes the loader panic, and whatever it accepts
// passes Validate again (the loader never returns an invalid config).
func FuzzLoad(f *testing.F) {
	for _, dir := range []string{"good", "bad"} {
		files, _ := filepath.Glob("testdata/config/" + dir + "/*.yaml")
		for _, p := range files {
			b, _ := os.ReadFile(p)
			f.Add(b, "")
		}
	}
	f.Add([]byte("limits: {classes: {marketing: {max_rps: 1e308}}}"), "SMSGW_LIMITS_BURST=1")
	f.Add([]byte("producers: &a [*a]"), "SMSGW_PRODUCERS=[]")
	f.Fuzz(func(t *testing.T, data []byte, env string) {
		cfg, err := Load(data, strings.Split(env, "\n"))
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Load returned a config that fails Validate: %v", err)
		}
	})
}
