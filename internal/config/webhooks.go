package config

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// WebhookSecretPrefix starts every Standard Webhooks secret.
const WebhookSecretPrefix = "whsec_"

// Bounds of a webhook secret's key bytes: the Standard Webhooks spec asks
// for 24 to 64 bytes.
const (
	minWebhookKey = 24
	maxWebhookKey = 64
)

// MaxWebhookAge bounds webhooks.max_age: a dead callback must be decided
// within the retention of the message it is about.
const MaxWebhookAge = 7 * 24 * time.Hour

// ParseWebhookSecret returns the key bytes of a "whsec_<base64>" secret.
// Errors never repeat the secret.
func ParseWebhookSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, WebhookSecretPrefix)
	if !ok {
		return nil, errors.New("must start with " + WebhookSecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errors.New("is not " + WebhookSecretPrefix + " followed by standard base64")
	}
	if len(key) < minWebhookKey || len(key) > maxWebhookKey {
		return nil, fmt.Errorf("key is %d bytes, want %d to %d", len(key), minWebhookKey, maxWebhookKey)
	}
	// Random key bytes: whsec_AAAA… (all zero) or one byte repeated signs
	// every callback with a key anyone can guess, as a weak secret would.
	distinct := map[byte]bool{}
	for _, c := range key {
		distinct[c] = true
	}
	if len(distinct) < minSecretDistinct {
		return nil, fmt.Errorf("key must hold at least %d different byte values (use random bytes: %s + openssl rand -base64 32)", minSecretDistinct, WebhookSecretPrefix)
	}
	return key, nil
}

// checkWebhookURL accepts an absolute http(s) URL with a host and without
// user info (credentials would end up in logs and dashboards), whose path
// means the same to every server (checkURLPath).
func checkWebhookURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return errors.New("is not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("must be an http:// or https:// URL")
	case u.Host == "" || u.Hostname() == "":
		return errors.New("must name a host")
	case u.User != nil:
		return errors.New("must not carry user info")
	case u.Fragment != "":
		return errors.New("must not carry a fragment")
	}
	return checkURLPath(u)
}

// maxPathDecodes is how many rounds of percent-decoding checkURLPath
// looks through: a server, or a proxy in front of it, may decode again
// what it has decoded.
const maxPathDecodes = 3

// checkURLPath refuses a path whose segments another server could read
// differently from the gateway: a "." or ".." segment (raw, percent-encoded
// in any case, encoded again, or followed by a ";" path parameter, which
// some servers drop), an encoded slash (%2F) and a backslash (raw or %5C,
// a separator to some servers). Without them a path is under a prefix
// exactly when its segments start with the prefix's: a callback_url cannot
// climb out of its webhook.allow prefix, and a prefix cannot climb out of
// its own path.
func checkURLPath(u *url.URL) error {
	for _, seg := range strings.Split(u.EscapedPath(), "/") {
		for i := 0; ; i++ {
			if strings.ContainsRune(seg, '\\') {
				return errors.New("must not have a backslash in its path (raw or %5C)")
			}
			if name, _, _ := strings.Cut(seg, ";"); name == "." || name == ".." {
				return errors.New("must not have a \".\" or \"..\" segment in its path (raw or percent-encoded)")
			}
			if i == maxPathDecodes {
				break
			}
			dec, err := url.PathUnescape(seg)
			if err != nil || dec == seg {
				break // nothing (more) a server could decode
			}
			if strings.ContainsRune(dec, '/') {
				return errors.New("must not have an encoded slash (%2F) in its path")
			}
			seg = dec
		}
	}
	return nil
}

// CheckCallbackURL is the rule a message's callback_url follows: the same
// shape as a configured webhook URL, at most 2048 bytes.
func CheckCallbackURL(s string) error {
	if len(s) > 2048 {
		return errors.New("has at most 2048 bytes")
	}
	return checkWebhookURL(s)
}

func validateWebhook(p *problems, key string, w WebhookConfig) {
	if w.URL != "" {
		if err := checkWebhookURL(w.URL); err != nil {
			p.add(key+".url", "%v", err)
		}
	}
	for i, a := range w.Allow {
		if err := checkWebhookURL(a); err != nil {
			p.add(fmt.Sprintf("%s.allow[%d]", key, i), "%v", err)
		} else if u, _ := url.Parse(a); u.Path == "" {
			// "https://a.example" would also allow "https://a.example.evil.test".
			p.add(fmt.Sprintf("%s.allow[%d]", key, i), "must end its host with a path, at least \"/\"")
		} else if u.RawQuery != "" || u.ForceQuery {
			// A prefix is matched by scheme, host and path segments; a
			// callback_url under it brings its own query.
			p.add(fmt.Sprintf("%s.allow[%d]", key, i), "must not carry a query")
		}
	}
	checkNetworks(p, key+".allow_networks", w.AllowNetworks)
	var cur []byte
	switch {
	case w.Enabled() && w.Secret == "":
		p.add(key+".secret", "is required with url or allow (%s<base64>)", WebhookSecretPrefix)
	case w.Secret != "":
		var err error
		if cur, err = ParseWebhookSecret(w.Secret); err != nil {
			p.add(key+".secret", "%v", err)
		}
	}
	if w.PreviousSecret == "" {
		return
	}
	prev, err := ParseWebhookSecret(w.PreviousSecret)
	switch {
	case err != nil:
		p.add(key+".previous_secret", "%v", err)
	case w.Secret == "":
		p.add(key+".previous_secret", "is only used beside secret (the secret that replaces it)")
	case cur != nil && bytes.Equal(cur, prev):
		// Two equal signatures rotate nothing; most likely the new secret
		// was not set where the old one was copied.
		p.add(key+".previous_secret", "must differ from secret (set secret to the new one)")
	}
}

func (c *Config) validateWebhooks(p *problems) {
	w := c.Webhooks
	checkNetworks(p, "webhooks.allow_networks", w.AllowNetworks)
	if w.Timeout <= 0 {
		p.add("webhooks.timeout", "must be > 0")
	}
	if w.MaxAge <= 0 || w.MaxAge > MaxWebhookAge {
		p.add("webhooks.max_age", "must be > 0 and at most %s", MaxWebhookAge)
	}
	if w.Concurrency < 1 {
		p.add("webhooks.concurrency", "must be >= 1")
	}
	if w.Workers < 1 {
		p.add("webhooks.workers", "must be >= 1")
	}
	if w.BackoffBase <= 0 {
		p.add("webhooks.backoff_base", "must be > 0")
	}
	if w.BackoffMax < w.BackoffBase {
		p.add("webhooks.backoff_max", "must be >= webhooks.backoff_base")
	}
	if w.BreakerFailures < 1 {
		p.add("webhooks.breaker_failures", "must be >= 1")
	}
	if w.BreakerOpen <= 0 {
		p.add("webhooks.breaker_open", "must be > 0")
	}
}

// Prefixes of the variables that set one producer's webhook secrets
// (SMSGW_WEBHOOK_SECRET_NOTIFY_WORKER, SMSGW_WEBHOOK_PREVIOUS_SECRET_NOTIFY_WORKER
// for producer "notify-worker"), so a secret need not be written into the
// file.
const (
	webhookSecretEnvPrefix         = EnvPrefix + "WEBHOOK_SECRET_"
	webhookPreviousSecretEnvPrefix = EnvPrefix + "WEBHOOK_PREVIOUS_SECRET_"
)

// webhookSecretEnv is the variable with prefix that names producer: its
// name upper-cased, every character but A-Z and 0-9 as "_".
func webhookSecretEnv(prefix, producer string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for _, r := range strings.ToUpper(producer) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// isWebhookSecretEnv reports whether name is one of applyWebhookSecrets'
// variables.
func isWebhookSecretEnv(name string) bool {
	return strings.HasPrefix(name, webhookSecretEnvPrefix) || strings.HasPrefix(name, webhookPreviousSecretEnvPrefix)
}

// applyWebhookSecrets sets producers' webhook secrets from
// SMSGW_WEBHOOK_SECRET_<PRODUCER> and their previous secrets from
// SMSGW_WEBHOOK_PREVIOUS_SECRET_<PRODUCER>; a variable that matches no
// producer is an error naming it (never its value).
func applyWebhookSecrets(cfg *Config, environ []string) error {
	var errs []error
	for _, e := range environ {
		name, val, ok := strings.Cut(e, "=")
		if !ok || !isWebhookSecretEnv(name) {
			continue
		}
		found := false
		for i := range cfg.Producers {
			w := &cfg.Producers[i].Webhook
			switch name {
			case webhookSecretEnv(webhookSecretEnvPrefix, cfg.Producers[i].Name):
				w.Secret = val
			case webhookSecretEnv(webhookPreviousSecretEnvPrefix, cfg.Producers[i].Name):
				w.PreviousSecret = val
			default:
				continue
			}
			found = true
		}
		if !found {
			errs = append(errs, fmt.Errorf("%s: environment variable names no producer", name))
		}
	}
	return errors.Join(errs...)
}

// checkNetworks refuses every entry of an allow_networks list (key) that
// is not a CIDR.
func checkNetworks(p *problems, key string, cidrs []string) {
	for i, s := range cidrs {
		if _, err := netip.ParsePrefix(s); err != nil {
			p.add(fmt.Sprintf("%s[%d]", key, i), "%q is not a CIDR", s)
		}
	}
}
