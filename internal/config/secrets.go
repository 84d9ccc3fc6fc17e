package config

import (
	"math"
	"net/netip"
	"net/url"
	"unicode"
)

// Every secret and key the operator writes in clear (a producer's or the
// admin's bearer key, their previous keys, provider.receipt_secret and its
// previous one, the secrets that sign inbound messages and receipts) must
// be hard to guess: the webhook endpoints take no bearer key, so anyone
// may try a signature, and a short secret is found in seconds. The rule
// is the one "whsec_" webhook secrets already follow in spirit (at least
// 16 random bytes): at least minSecretLen characters, at least
// minSecretDistinct different ones, and an estimated strength of at least
// minSecretBits (the length times log2 of the alphabet its character
// classes span). A 32-hex-digit vendor token passes; "x", one character
// repeated, or sixteen digits do not. The error names the key, never the value.
const (
	minSecretLen      = 16
	minSecretDistinct = 8
	minSecretBits     = 64
)

// checkSecret adds a problem under key when s is set but weak.
func checkSecret(p *problems, key, s string) {
	if s == "" {
		return
	}
	if why := secretWeakness(s); why != "" {
		p.add(key, "%s (use a random value, e.g. openssl rand -hex 32)", why)
	}
}

// secretWeakness says why s is too weak to guess-proof a signature or a
// key; "" when it is not.
func secretWeakness(s string) string {
	if n := len([]rune(s)); n < minSecretLen {
		return "must be at least 16 characters"
	}
	distinct := map[rune]bool{}
	var lower, upper, digit, other bool
	for _, r := range s {
		distinct[r] = true
		switch {
		case 'a' <= r && r <= 'z':
			lower = true
		case 'A' <= r && r <= 'Z':
			upper = true
		case unicode.IsDigit(r):
			digit = true
		default:
			other = true
		}
	}
	if len(distinct) < minSecretDistinct {
		return "must hold at least 8 different characters"
	}
	alphabet := 0
	for _, c := range []struct {
		used bool
		size int
	}{{lower, 26}, {upper, 26}, {digit, 10}, {other, 33}} {
		if c.used {
			alphabet += c.size
		}
	}
	if bits := float64(len([]rune(s))) * math.Log2(float64(alphabet)); bits < minSecretBits {
		return "is too easy to guess: use more characters or more kinds of them (about 64 bits at least)"
	}
	return ""
}

// checkWebhookTLS adds a problem under key when u, the public URL a vendor
// posts receipts or inbound messages to, is not https: over http the
// request (its signature, the recipient's number and text) can be read
// and captured on the way. A loopback host may use http (tests, a local
// simulator).
func checkWebhookTLS(p *problems, key, u string) {
	v, err := url.Parse(u)
	if err != nil || v.Scheme == "https" || v.Scheme != "http" {
		return // CheckURL reports what is wrong with it
	}
	host := v.Hostname()
	if ip, err := netip.ParseAddr(host); (err == nil && ip.IsLoopback()) || host == "localhost" {
		return
	}
	p.add(key, "must be an https:// URL (http:// only on a loopback host): the vendor's request carries its signature and the recipient's number")
}
