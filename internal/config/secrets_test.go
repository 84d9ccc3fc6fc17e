package config

import (
	"strings"
	"testing"

	"smsgw/internal/provider/twilio"
	"smsgw/internal/provider/vonage"
)

// TestWeakSecretsRefused: every secret and key in clear is refused when
// short, made of few characters, or too easy to guess (sixteen digits),
// with a problem naming its key and never the value; random ones pass.
func TestWeakSecretsRefused(t *testing.T) {
	const strong = "f3a9c2e81b7d4a60c5e2b9d817f4a3c0"
	weak := []string{"x", "s3cret", "aaaaaaaaaaaaaaaaaaaa", "abababababababababab", "1234567890123456", "receipt-secre"}
	for _, c := range []struct {
		key string
		set func(*Config, string)
	}{
		{"provider.receipt_secret", func(c *Config, s string) { c.Provider.ReceiptSecret = s }},
		{"provider.previous_receipt_secret", func(c *Config, s string) {
			c.Provider.ReceiptSecret, c.Provider.PreviousReceiptSecret = strong, s
		}},
		{"producers[0] (app).key", func(c *Config, s string) { c.Producers[0].Key = s }},
		{"producers[0] (app).previous_key", func(c *Config, s string) { c.Producers[0].PreviousKey = s }},
		{"admin.key", func(c *Config, s string) { c.Admin.Key = s }},
		{"admin.previous_key", func(c *Config, s string) { c.Admin.Key, c.Admin.PreviousKey = strong, s }},
		{"provider.twilio.auth_token", func(c *Config, s string) {
			c.Provider.Kind, c.Provider.HTTP.URL = "twilio", ""
			c.Provider.Twilio = twilio.Settings{AccountSID: "AC0123456789abcdef0123456789abcdef", AuthToken: s, From: "+15005550006"}
		}},
		{"provider.twilio.webhook_auth_token", func(c *Config, s string) {
			c.Provider.Kind, c.Provider.HTTP.URL = "twilio", ""
			c.Provider.Twilio = twilio.Settings{AccountSID: "AC0123456789abcdef0123456789abcdef", AuthToken: strong, WebhookAuthToken: s, From: "+15005550006"}
		}},
		{"provider.vonage.signature_secret", func(c *Config, s string) {
			c.Provider.Kind, c.Provider.HTTP.URL = "vonage", ""
			c.Provider.Vonage = vonage.Settings{APIKey: "k", APISecret: "api-secret", From: "ACME", SignatureSecret: s}
		}},
	} {
		for _, w := range weak {
			cfg := valid(t)
			c.set(&cfg, w)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), c.key+": ") {
				t.Errorf("%s = %q: %v; want a problem naming %s", c.key, w, err, c.key)
				continue
			}
			if len(w) > 3 && strings.Contains(err.Error(), w) {
				t.Errorf("%s: the problem repeats the secret: %v", c.key, err)
			}
		}
		cfg := valid(t)
		c.set(&cfg, "Zq8-"+strong[:20])
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s with a random value: %v", c.key, err)
		}
	}
}

// TestWebhookURLsNeedTLS: provider.receipt_url and provider.inbound_url
// are refused as http:// (naming the key) unless their host is loopback.
func TestWebhookURLsNeedTLS(t *testing.T) {
	for _, c := range []struct {
		key string
		set func(*Config, string)
	}{
		{"provider.receipt_url", func(c *Config, u string) { c.Provider.ReceiptURL = u }},
		{"provider.inbound_url", func(c *Config, u string) { c.Provider.InboundURL = u }},
	} {
		for u, ok := range map[string]bool{
			"http://sms.example.com/v1/x": false, "http://10.0.0.7:8080/v1/x": false,
			"https://sms.example.com/v1/x": true, "http://127.0.0.1:8080/v1/x": true, "http://[::1]:8080/v1/x": true,
			"http://localhost:8080/v1/x": true,
		} {
			cfg := valid(t)
			c.set(&cfg, u)
			err := cfg.Validate()
			if ok && err != nil {
				t.Errorf("%s = %s: %v", c.key, u, err)
			}
			if !ok && (err == nil || !strings.Contains(err.Error(), c.key+": must be an https:// URL")) {
				t.Errorf("%s = %s: %v; want it refused naming the key", c.key, u, err)
			}
		}
	}
}
