package config

import (
	"fmt"
	"strings"
	"testing"
)

// A webhook.allow prefix (and a webhook.url) whose path another server
// could read differently, a dot segment raw or percent-encoded, an encoded
// slash or a backslash, stops start-up naming the key; so does a prefix
// with a query, which the segment match would ignore. Clean prefixes load.
func TestWebhookAllowPrefixPath(t *testing.T) {
	load := func(allow, url string) error {
		data := fmt.Sprintf(`
provider: {url: "http://127.0.0.1:9100/send"}
producers: [{name: notify, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1,
  webhook: {secret: %q, url: %q, allow: [%q]}}]
`, testWebhookSecret, url, allow)
		_, err := Load([]byte(data), nil)
		return err
	}
	const key = "producers[0] (notify).webhook.allow[0]"
	for _, bad := range []string{
		"https://a.example/cb/../admin/",
		"https://a.example/../",
		"https://a.example/cb/./",
		"https://a.example/cb/%2e%2E/",
		"https://a.example/cb/.%2e",
		"https://a.example/cb/%252e%252e/",
		"https://a.example/cb/..;x/",
		"https://a.example/cb%2fadmin/",
		"https://a.example/cb%5c/",
		`https://a.example/cb\`,
		"https://a.example/cb/?token=1",
		"https://a.example/cb/?",
	} {
		err := load(bad, "")
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("allow %q: %v, want an error naming %s", bad, err, key)
		}
	}
	if err := load("https://a.example/cb/", "https://a.example/x/%2e%2e/admin"); err == nil ||
		!strings.Contains(err.Error(), "producers[0] (notify).webhook.url") {
		t.Errorf("url with a dot segment: %v, want an error naming webhook.url", err)
	}
	for _, good := range []string{"https://a.example/", "https://a.example/cb/", "https://a.example/cb", "https://a.example/cb/.../", "https://a.example/%7Ecb/"} {
		if err := load(good, "https://a.example/hook"); err != nil {
			t.Errorf("allow %q: %v", good, err)
		}
	}
}
