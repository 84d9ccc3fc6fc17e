package config

import (
	"strings"
	"testing"
	"time"
)

const testWebhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// A producer's webhook secret can come from SMSGW_WEBHOOK_SECRET_<NAME>; a
// variable naming no producer stops start-up naming the variable, and no
// error ever repeats a secret.
func TestWebhookSecretFromEnv(t *testing.T) {
	base := []byte(`
provider: {url: "http://127.0.0.1:9100/send"}
producers: [{name: notify-worker, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1, webhook: {url: "https://hooks.example/sms"}}]
webhooks: {timeout: 2s}
`)
	cfg, err := Load(base, []string{"SMSGW_WEBHOOK_SECRET_NOTIFY_WORKER=" + testWebhookSecret})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Producers[0].Webhook.Secret; got != testWebhookSecret {
		t.Errorf("secret not taken from the environment")
	}
	if cfg.Webhooks.Timeout != 2*time.Second || cfg.Webhooks.MaxAge != 24*time.Hour {
		t.Errorf("webhooks = %+v, want timeout 2s and the default max_age 24h", cfg.Webhooks)
	}
	_, err = Load(base, []string{"SMSGW_WEBHOOK_SECRET_OTHER=" + testWebhookSecret})
	if err == nil || !strings.Contains(err.Error(), "SMSGW_WEBHOOK_SECRET_OTHER") {
		t.Errorf("unknown producer: %v, want an error naming the variable", err)
	}
	bad := "whsec_c2hvcnQtc2VjcmV0"
	_, err = Load(base, []string{"SMSGW_WEBHOOK_SECRET_NOTIFY_WORKER=" + bad})
	if err == nil || !strings.Contains(err.Error(), "producers[0] (notify-worker).webhook.secret") {
		t.Fatalf("short secret: %v, want an error naming the key", err)
	}
	if strings.Contains(err.Error(), bad) || strings.Contains(err.Error(), "c2hvcnQ") {
		t.Errorf("the error repeats the secret: %v", err)
	}
}

func TestParseWebhookSecret(t *testing.T) {
	key, err := ParseWebhookSecret(testWebhookSecret)
	if err != nil || len(key) != 24 {
		t.Fatalf("ParseWebhookSecret = %d bytes, %v", len(key), err)
	}
	for _, s := range []string{"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_!!!", "whsec_c2hvcnQ="} {
		if _, err := ParseWebhookSecret(s); err == nil {
			t.Errorf("ParseWebhookSecret(%q) accepted", s)
		}
	}
}

// webhook.previous_secret, the secret a rotation replaces: the same format
// as secret, from the file or SMSGW_WEBHOOK_PREVIOUS_SECRET_<PRODUCER>;
// refused when it equals secret (as bytes: two spellings of one key are
// one key) or stands without secret, each error naming the key and never
// repeating a secret.
func TestWebhookPreviousSecret(t *testing.T) {
	const (
		newSecret = "whsec_" + "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=" // 32 bytes
		// The same 25 key bytes spelt twice: standard base64 leaves the
		// last character's low bits free.
		key25a = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3OA=="
		key25b = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3OB=="
		short  = "whsec_c2hvcnQtc2VjcmV0"
	)
	doc := func(webhook string) []byte {
		return []byte(`
provider: {url: "http://127.0.0.1:9100/send"}
producers:
  - {name: login, key: "login-key-0123456789", classes: [otp], rate: 1, burst: 1}
  - {name: notify-worker, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1, webhook: ` + webhook + `}
`)
	}
	const key = "producers[1] (notify-worker).webhook.previous_secret"

	cfg, err := Load(doc(`{url: "https://hooks.example/sms", secret: "`+newSecret+`", previous_secret: "`+testWebhookSecret+`"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Producers[1].Webhook; w.Secret != newSecret || w.PreviousSecret != testWebhookSecret {
		t.Errorf("previous_secret not read from the file")
	}

	base := doc(`{url: "https://hooks.example/sms"}`)
	cfg, err = Load(base, []string{
		"SMSGW_WEBHOOK_SECRET_NOTIFY_WORKER=" + newSecret,
		"SMSGW_WEBHOOK_PREVIOUS_SECRET_NOTIFY_WORKER=" + testWebhookSecret,
	})
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Producers[1].Webhook; w.Secret != newSecret || w.PreviousSecret != testWebhookSecret {
		t.Errorf("secret and previous_secret not both taken from the environment")
	}
	if cfg.Producers[0].Webhook.PreviousSecret != "" {
		t.Errorf("another producer's previous_secret set")
	}
	_, err = Load(base, []string{"SMSGW_WEBHOOK_PREVIOUS_SECRET_OTHER=" + testWebhookSecret})
	if err == nil || !strings.Contains(err.Error(), "SMSGW_WEBHOOK_PREVIOUS_SECRET_OTHER") {
		t.Errorf("unknown producer: %v, want an error naming the variable", err)
	}

	for _, c := range []struct {
		name, webhook string
		env           []string
		want          string
	}{
		{"too short", `{url: "https://h.example/", secret: "` + newSecret + `", previous_secret: "` + short + `"}`, nil, key + ": key is"},
		{"too short, from the environment", `{url: "https://h.example/", secret: "` + newSecret + `"}`,
			[]string{"SMSGW_WEBHOOK_PREVIOUS_SECRET_NOTIFY_WORKER=" + short}, key + ": key is"},
		{"not whsec_", `{url: "https://h.example/", secret: "` + newSecret + `", previous_secret: "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`, nil, key + ": must start with whsec_"},
		{"equal to secret", `{url: "https://h.example/", secret: "` + newSecret + `", previous_secret: "` + newSecret + `"}`, nil, key + ": must differ from secret"},
		{"the same key spelt otherwise", `{url: "https://h.example/", secret: "` + key25a + `", previous_secret: "` + key25b + `"}`, nil, key + ": must differ from secret"},
		{"without secret", `{previous_secret: "` + testWebhookSecret + `"}`, nil, key + ": is only used beside secret"},
	} {
		_, err := Load(doc(c.webhook), c.env)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
			continue
		}
		for _, s := range []string{newSecret, testWebhookSecret, short, key25a, key25b, "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "ZmVkY2Jh", "c2hvcnQ", "MDEyMzQ1"} {
			if strings.Contains(err.Error(), s) {
				t.Errorf("%s: the error repeats a secret: %v", c.name, err)
			}
		}
	}
}

// webhook.allow_networks, a producer's own list of networks its callbacks
// may reach: read from the file, each entry a CIDR, an error naming the
// entry's key otherwise; the global webhooks.allow_networks is checked by
// the same rule.
func TestWebhookAllowNetworksPerProducer(t *testing.T) {
	doc := func(webhook, global string) []byte {
		return []byte(`
provider: {url: "http://127.0.0.1:9100/send"}
webhooks: {allow_networks: ` + global + `}
producers:
  - {name: notify-worker, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1, webhook: ` + webhook + `}
`)
	}
	cfg, err := Load(doc(`{url: "https://hooks.example/sms", secret: "`+testWebhookSecret+`", allow_networks: ["10.0.0.0/8", "fd00::/8"]}`, `[]`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Producers[0].Webhook.AllowNetworks; len(got) != 2 || got[0] != "10.0.0.0/8" || got[1] != "fd00::/8" {
		t.Errorf("allow_networks = %v", got)
	}
	for _, c := range []struct{ webhook, global, want string }{
		{`{url: "https://h.example/", secret: "` + testWebhookSecret + `", allow_networks: ["10.0.0.0/8", "10.0.0.300/8"]}`, `[]`,
			`producers[0] (notify-worker).webhook.allow_networks[1]: "10.0.0.300/8" is not a CIDR`},
		{`{url: "https://h.example/", secret: "` + testWebhookSecret + `"}`, `[localhost]`,
			`webhooks.allow_networks[0]: "localhost" is not a CIDR`},
	} {
		if _, err := Load(doc(c.webhook, c.global), nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want an error with %q", err, c.want)
		}
	}
}

// A webhook secret whose key bytes are not random (all zero, one byte
// repeated) is refused naming the key, never repeating the secret.
func TestWebhookSecretNotUniform(t *testing.T) {
	for _, s := range []string{"whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "whsec_" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB", "whsec_AQIDBAECAwQBAgMEAQIDBAECAwQBAgME"} {
		_, err := Load([]byte(`
provider: {url: "http://127.0.0.1:9100/send"}
producers:
  - {name: notify, key: "app-key-0123456789ab", classes: [transactional], rate: 1, burst: 1, webhook: {url: "https://h.example/", secret: "`+s+`"}}
`), nil)
		if err == nil || !strings.Contains(err.Error(), "producers[0] (notify).webhook.secret: key must hold at least 8 different byte values") || strings.Contains(err.Error(), s[6:]) {
			t.Errorf("%s: %v, want a refusal naming the key", s, err)
		}
	}
	if _, err := ParseWebhookSecret(testWebhookSecret); err != nil {
		t.Errorf("a random secret refused: %v", err)
	}
}
