package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"smsgw/internal/config"
	"smsgw/internal/gateway"
	"smsgw/internal/redistest"
)

// check-config and serve refuse the same files with the same words: every
// bad fixture, including the rules a component used to find only at
// start-up, stops both before anything starts.
func TestServeAndCheckConfigRefuseAlike(t *testing.T) {
	files, _ := filepath.Glob("../../internal/config/testdata/bad/*.yaml")
	if len(files) == 0 {
		t.Fatal("no bad fixtures")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(data), "\n")
		want := strings.TrimPrefix(first, "# want: ")
		for _, cmd := range []string{"check-config", "serve"} {
			var out, errb bytes.Buffer
			if code := run([]string{cmd, "--config", f}, &out, &errb); code != 1 || !strings.Contains(errb.String(), want) {
				t.Errorf("%s %s: exit %d, stderr %q; want exit 1 naming %q", cmd, filepath.Base(f), code, errb.String(), want)
			}
		}
	}
}

// What check-config accepts, serve starts: a gateway is built (queue,
// limiter with its Redis-down fallback, guard, provider, HTTP server) from
// configurations at the edge of every rule that used to be checked only by
// a component at start-up.
func TestServeBuildsWhatCheckConfigAccepts(t *testing.T) {
	edges := map[string]string{
		"retention equal to the idempotency window": `messages: {retention: 24h}`,
		"write_timeout just past the longest OTP":   `messages: {otp_deadline: 5s}` + "\n" + `http: {write_timeout: 10001ms}`,
		"trusted proxies, both families":            `http: {trusted_proxies: ["10.0.0.0/8", "::1/128"]}`,
		"guard window of one millisecond":           `dispatch: {suspension_guard: {window: 1ms, share: 0.999}}`,
		"the limiter's highest rate":                "provider: {url: \"http://127.0.0.1:1/send\", contract_rps: 2000000}\nlimits: {target_rps: 1000000, burst: 5, max_senders: 1}",
		"a slow rate over many senders":             `limits: {target_rps: 0.01, burst: 1, max_senders: 1000, classes: {marketing: {max_rps: 0.005}}}`,
		"twilio with a messaging service":           `provider: {kind: twilio, url: "http://127.0.0.1:1", twilio: {account_sid: AC11111111111111111111111111111111, auth_token: 0123456789abcdef0123456789abcdef, messaging_service_sid: MG0123456789abcdef0123456789abcdef}}`,
		"vonage":                                    `provider: {kind: vonage, vonage: {api_key: k, api_secret: s, from: ACME}}`,
		"quiet hours for marketing":                 `limits: {classes: {marketing: {max_rps: 70, quiet_hours: {from: "21:00", to: "08:00"}}}}`,
	}
	for name, extra := range edges {
		for _, redis := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/redis=%v", name, redis), func(t *testing.T) {
				addr := ""
				if redis {
					addr = redistest.Addr(t)
				}
				doc := fmt.Sprintf("listen: 127.0.0.1:0\nredis: {addr: %q}\nstore: {path: %q}\naccount: %s\n"+
					"producers: [{name: app, key: app-key-0123456789ab, classes: [otp], rate: 1000000, burst: 1}]\n",
					addr, t.TempDir(), redistest.Prefix(t))
				if !strings.Contains(extra, "provider:") {
					doc += "provider: {url: \"http://127.0.0.1:1/send\"}\n"
				}
				cfg, err := config.Load([]byte(doc+extra), nil)
				if err != nil {
					t.Fatalf("check-config refuses it: %v", err)
				}
				app, err := gateway.New(t.Context(), cfg, gateway.Options{})
				if err != nil {
					t.Fatalf("check-config accepts it, serve refuses it: %v", err)
				}
				if err := app.Stop(context.Background()); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// check-config says when a rotation is under way, naming the keys that
// hold an old credential and never a key, a secret or a hash of one;
// from the file and from an SMSGW_* variable alike.
func TestCheckConfigReportsRotation(t *testing.T) {
	check := func(path string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run([]string{"check-config", "--config", path}, &out, &errb); code != 0 {
			t.Fatalf("check-config %s: exit %d: %s", path, code, errb.String())
		}
		return out.String()
	}
	secrets := []string{"login-key-new-0123456789", "login-key-old-0123456789", "admin-key-new-0123456789", "admin-key-old-0123456789",
		"receipt-secret-new-0123", "receipt-secret-old-0123", "admin-key-0123456789", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		"60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752", "60303ae22b99", "9f86d081884c"}
	clean := func(out string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("check-config prints a key, a secret or a hash of one (%.12s...):\n%s", s, out)
			}
		}
	}

	out := check("../../internal/config/testdata/good/full.yaml")
	if !strings.Contains(out, "\n  rotation: none under way\n") {
		t.Errorf("no rotation configured, stdout:\n%s", out)
	}

	out = check("../../internal/config/testdata/good/rotation.yaml")
	for _, want := range []string{"rotation: under way", "producers[0] (login).previous_key", "producers[1] (notify-worker).previous_key_sha256",
		"admin.previous_key", "provider.previous_receipt_secret", "smsgw_auth_previous_key_total"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	clean(out)

	t.Setenv("SMSGW_ADMIN_PREVIOUS_KEY", "admin-key-old-0123456789")
	out = check("../../internal/config/testdata/good/full.yaml")
	if !strings.Contains(out, "rotation: under way, the old credential still accepted by admin.previous_key;") {
		t.Errorf("SMSGW_ADMIN_PREVIOUS_KEY set, stdout:\n%s", out)
	}
	clean(out)
}
