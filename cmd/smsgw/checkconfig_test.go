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
		"twilio with a messaging service":           `provider: {kind: twilio, url: "http://127.0.0.1:1", twilio: {account_sid: AC1, auth_token: t, messaging_service_sid: MG1}}`,
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
