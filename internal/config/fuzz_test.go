package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad: no input makes the loader panic, and whatever it accepts
// passes Validate again (the loader never returns an invalid config).
func FuzzLoad(f *testing.F) {
	for _, dir := range []string{"good", "bad"} {
		files, _ := filepath.Glob("testdata/" + dir + "/*.yaml")
		for _, p := range files {
			b, _ := os.ReadFile(p)
			f.Add(b, "")
		}
	}
	f.Add([]byte("limits: {classes: {marketing: {max_rps: 1e308}}}"), "SMSGW_LIMITS_BURST=1")
	f.Add([]byte("producers: &a [*a]"), "SMSGW_PRODUCERS=[]")
	f.Add([]byte("provider: {kind: twilio}"), "SMSGW_PROVIDER_TWILIO={account_sid: a, auth_token: b, from: c}\nSMSGW_PROVIDER_URL=x")
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
