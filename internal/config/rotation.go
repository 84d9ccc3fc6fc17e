package config

import (
	"fmt"
	"strings"
)

// Overlap rotation of credentials. While a rotation is under way the
// credential being replaced stays accepted beside the new one, so that
// the pods and the other side (a producer, the operator's tools, the
// provider) need not switch at the same instant:
//
//   - producers[].previous_key / previous_key_sha256: a request bearing
//     it is the producer's;
//   - admin.previous_key / previous_key_sha256: the same for the admin
//     endpoints;
//   - provider.previous_receipt_secret: a generic (http) receipt signed
//     with it is taken;
//   - producers[].webhook.previous_secret (webhooks.go): every status
//     callback carries a second signature made with it.
//
// A previous credential follows the rules of the current one and must
// differ from it; a previous key must also differ from every other key
// the gateway takes, or a request bearing it would name two principals.

// keyOwners maps the SHA-256 of every bearer key the configuration holds
// to whose it is, in words an error may show ("producer login",
// "producer login's previous_key", "admin.key"); never the key.
type keyOwners map[[32]byte]string

// checkPreviousKey applies the current key's rules (a strong key in
// clear, checkSecret, or 64 hex characters of its SHA-256, not both) to
// a previous key under prefix ("producers[0] (login)", "admin") and
// returns its hash when it is usable.
func checkPreviousKey(p *problems, prefix, clear, hexHash string) ([32]byte, bool) {
	switch {
	case clear != "" && hexHash != "":
		p.add(prefix+".previous_key", "set previous_key or previous_key_sha256, not both")
	case hexHash != "" && !isSHA256Hex(hexHash):
		p.add(prefix+".previous_key_sha256", "must be 64 hex characters")
	case clear != "" && secretWeakness(clear) != "":
		checkSecret(p, prefix+".previous_key", clear)
	default:
		return keyHash(clear, hexHash), true
	}
	return [32]byte{}, false
}

// previousKeyField is the key a previous key given as clear or hexHash is
// reported under.
func previousKeyField(prefix, clear string) string {
	if clear != "" {
		return prefix + ".previous_key"
	}
	return prefix + ".previous_key_sha256"
}

// validatePreviousKeys checks the producers' and the admin's previous
// keys against their own rules, against the key each replaces (current:
// the producers' usable keys by index, nil when refused) and against
// every other key in keys, to which they are added.
func (c *Config) validatePreviousKeys(p *problems, keys keyOwners, current []*[32]byte) {
	rotatingProducerAdmin := ""
	for i, pr := range c.Producers {
		if !pr.Rotating() {
			continue
		}
		prefix := producerKey(i, pr)
		h, ok := checkPreviousKey(p, prefix, pr.PreviousKey, pr.PreviousKeySHA256)
		if !ok {
			continue
		}
		field := previousKeyField(prefix, pr.PreviousKey)
		if pr.Name == AdminPrincipal {
			rotatingProducerAdmin = field
		}
		switch other, dup := keys[h]; {
		case current[i] != nil && *current[i] == h:
			// Most likely the new key was not set where the old one was copied.
			p.add(field, "must differ from the current key (set key or key_sha256 to the new one)")
		case dup:
			p.add(field, "same key as %s", other)
		default:
			keys[h] = "producer " + pr.Name + "'s previous_key"
		}
	}
	a := c.Admin
	if !a.Rotating() {
		return
	}
	h, ok := checkPreviousKey(p, "admin", a.PreviousKey, a.PreviousKeySHA256)
	if !ok {
		return
	}
	field := previousKeyField("admin", a.PreviousKey)
	switch other, dup := keys[h]; {
	case !a.Enabled():
		p.add(field, "is only used beside admin.key or admin.key_sha256 (the key that replaces it)")
	case h == a.KeyHash():
		p.add(field, "must differ from the current key (set admin.key or admin.key_sha256 to the new one)")
	case dup:
		p.add(field, "same key as %s", other)
	case rotatingProducerAdmin != "":
		// Both would count as principal "admin" in smsgw_auth_previous_key_total.
		p.add(rotatingProducerAdmin, "a producer named %s cannot rotate its key while admin.previous_key is set too: rotate one, then the other", AdminPrincipal)
	}
}

// AdminPrincipal names the admin in the gateway's
// smsgw_auth_previous_key_total and in its logs, beside the producers'
// names.
const AdminPrincipal = "admin"

// validatePreviousReceiptSecret: provider.previous_receipt_secret, the
// receipt secret a rotation replaces, goes beside receipt_secret, differs
// from it, and only the generic adapter reads it.
func validatePreviousReceiptSecret(p *problems, pc ProviderConfig) {
	const key = "provider.previous_receipt_secret"
	switch {
	case pc.PreviousReceiptSecret == "":
	case pc.Kind == "twilio" || pc.Kind == "vonage":
		p.add(key, "is only read by the http adapter (provider.kind is %s)", pc.Kind)
	case pc.ReceiptSecret == "":
		p.add(key, "is only used beside provider.receipt_secret (the secret that replaces it)")
	case pc.PreviousReceiptSecret == pc.ReceiptSecret:
		p.add(key, "must differ from provider.receipt_secret (set receipt_secret to the new one)")
	}
}

// Rotations names, by key path and never by value, every credential
// whose previous one is still accepted: a rotation under way, ended by
// removing the key. `smsgw check-config` and start-up report them.
func (c Config) Rotations() []string {
	var out []string
	for i, pr := range c.Producers {
		if pr.Rotating() {
			out = append(out, previousKeyField(producerKey(i, pr), pr.PreviousKey))
		}
		if pr.Webhook.PreviousSecret != "" {
			out = append(out, producerKey(i, pr)+".webhook.previous_secret")
		}
	}
	if c.Admin.Rotating() {
		out = append(out, previousKeyField("admin", c.Admin.PreviousKey))
	}
	if c.Provider.PreviousReceiptSecret != "" {
		out = append(out, "provider.previous_receipt_secret")
	}
	return out
}

// RotationSummary is Rotations in one line, for `smsgw check-config`.
func (c Config) RotationSummary() string {
	r := c.Rotations()
	if len(r) == 0 {
		return "none under way"
	}
	return fmt.Sprintf("under way, the old credential still accepted by %s; remove each once nothing uses it "+
		"(smsgw_auth_previous_key_total, smsgw_receipt_signatures_total{secret=\"previous\"} flat; docs/operations.md, \"Rotating credentials\")",
		strings.Join(r, ", "))
}
