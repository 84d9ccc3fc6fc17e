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
