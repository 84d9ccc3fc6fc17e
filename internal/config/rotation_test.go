package config

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// Keys of the rotation tests, in clear; each hash is a secret too.
const (
	rotLoginKey   = "login-key-0123456789"
	rotLoginOld   = "login-old-0123456789"
	rotNotifyKey  = "notify-key-0123456789"
	rotNotifyOld  = "notify-old-0123456789"
	rotAdminKey   = "admin-key-0123456789"
	rotAdminOld   = "admin-old-0123456789"
	rotReceipt    = "receipt-secret-new"
	rotReceiptOld = "receipt-secret-old"
)

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// rotationDoc is a configuration with producers login and notify, an
// admin key and a receipt secret; extra (YAML) is merged over it: a
// producers list replaces theirs.
func rotationDoc(producers, admin, provider string) []byte {
	if producers == "" {
		producers = `[{name: login, key: "` + rotLoginKey + `", classes: [otp], rate: 1, burst: 1},
            {name: notify, key: "` + rotNotifyKey + `", classes: [otp], rate: 1, burst: 1}]`
	}
	if admin == "" {
		admin = `{key: "` + rotAdminKey + `"}`
	}
	if provider == "" {
		provider = `{url: "http://127.0.0.1:9100/send", receipt_secret: "` + rotReceipt + `"}`
	}
	return []byte("provider: " + provider + "\nproducers: " + producers + "\nadmin: " + admin + "\n")
}

// noSecrets fails t when text shows any key or secret of the rotation
// tests, in clear or as its SHA-256.
func noSecrets(t *testing.T, what, text string) {
	t.Helper()
	for _, s := range []string{rotLoginKey, rotLoginOld, rotNotifyKey, rotNotifyOld, rotAdminKey, rotAdminOld, rotReceipt, rotReceiptOld, "short-old"} {
		if strings.Contains(text, s) || strings.Contains(text, sha256Hex(s)) || strings.Contains(text, sha256Hex(s)[:16]) {
			t.Errorf("%s shows a key or its hash: %s", what, text)
		}
	}
}

// A rotation configured in the file: both producers, the admin and the
// receipt secret have a previous credential, in clear or as a digest, and
// Rotations names each by key path.
func TestPreviousKeysLoad(t *testing.T) {
	cfg, err := Load(rotationDoc(
		`[{name: login, key: "`+rotLoginKey+`", previous_key: "`+rotLoginOld+`", classes: [otp], rate: 1, burst: 1},
          {name: notify, key_sha256: "`+sha256Hex(rotNotifyKey)+`", previous_key_sha256: "`+sha256Hex(rotNotifyOld)+`", classes: [otp], rate: 1, burst: 1}]`,
		`{key: "`+rotAdminKey+`", previous_key_sha256: "`+sha256Hex(rotAdminOld)+`"}`,
		`{url: "http://127.0.0.1:9100/send", receipt_secret: "`+rotReceipt+`", previous_receipt_secret: "`+rotReceiptOld+`"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Producers[0].PreviousKeyHash(); got != sha256.Sum256([]byte(rotLoginOld)) || !cfg.Producers[0].Rotating() {
		t.Errorf("login's previous key not read")
	}
	if got := cfg.Producers[1].PreviousKeyHash(); got != sha256.Sum256([]byte(rotNotifyOld)) {
		t.Errorf("notify's previous key_sha256 not read")
	}
	if got := cfg.Admin.PreviousKeyHash(); got != sha256.Sum256([]byte(rotAdminOld)) || !cfg.Admin.Rotating() {
		t.Errorf("the admin's previous key not read")
	}
	if cfg.Provider.PreviousReceiptSecret != rotReceiptOld {
		t.Errorf("previous_receipt_secret not read")
	}
	want := "producers[0] (login).previous_key, producers[1] (notify).previous_key_sha256, admin.previous_key_sha256, provider.previous_receipt_secret"
	if got := strings.Join(cfg.Rotations(), ", "); got != want {
		t.Errorf("Rotations() = %q, want %q", got, want)
	}
	sum := cfg.RotationSummary()
	if !strings.Contains(sum, "under way") || !strings.Contains(sum, want) {
		t.Errorf("RotationSummary() = %q", sum)
	}
	noSecrets(t, "RotationSummary", sum)

	plain, err := Load(rotationDoc("", "", ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := plain.Rotations(); len(r) != 0 || plain.RotationSummary() != "none under way" || plain.Producers[0].Rotating() || plain.Admin.Rotating() {
		t.Errorf("no rotation configured: Rotations() = %v, summary %q", r, plain.RotationSummary())
	}
}

// Every refused previous credential is reported under its own key, and no
// error shows a key, a secret or a hash of one.
func TestPreviousKeysRefused(t *testing.T) {
	login := func(extra string) string {
		return `{name: login, key: "` + rotLoginKey + `", classes: [otp], rate: 1, burst: 1` + extra + `}`
	}
	notify := func(extra string) string {
		return `{name: notify, key: "` + rotNotifyKey + `", classes: [otp], rate: 1, burst: 1` + extra + `}`
	}
	list := func(ps ...string) string { return "[" + strings.Join(ps, ", ") + "]" }
	const (
		loginKey  = "producers[0] (login)"
		notifyKey = "producers[1] (notify)"
	)
	for _, c := range []struct {
		name, producers, admin, provider string
		env                              []string
		want                             string
	}{
		// A producer's previous key: the current key's rules, differs from
		// it and from every other key.
		{name: "producer: clear and sha256 both", producers: list(login(`, previous_key: "`+rotLoginOld+`", previous_key_sha256: "`+sha256Hex(rotLoginOld)+`"`), notify("")),
			want: loginKey + ".previous_key: set previous_key or previous_key_sha256, not both"},
		{name: "producer: sha256 not hex", producers: list(login(`, previous_key_sha256: "`+strings.Repeat("z", 64)+`"`), notify("")),
			want: loginKey + ".previous_key_sha256: must be 64 hex characters"},
		{name: "producer: sha256 too short", producers: list(login(`, previous_key_sha256: "`+sha256Hex(rotLoginOld)[:62]+`"`), notify("")),
			want: loginKey + ".previous_key_sha256: must be 64 hex characters"},
		{name: "producer: too short", producers: list(login(`, previous_key: "short-old"`), notify("")),
			want: loginKey + ".previous_key: must be at least 16 characters"},
		{name: "producer: equal to its key", producers: list(login(`, previous_key: "`+rotLoginKey+`"`), notify("")),
			want: loginKey + ".previous_key: must differ from the current key"},
		{name: "producer: its key's digest", producers: list(login(`, previous_key_sha256: "`+sha256Hex(rotLoginKey)+`"`), notify("")),
			want: loginKey + ".previous_key_sha256: must differ from the current key"},
		{name: "producer: another producer's key", producers: list(login(""), notify(`, previous_key: "`+rotLoginKey+`"`)),
			want: notifyKey + ".previous_key: same key as producer login"},
		{name: "producer: its key is another producer's previous key", producers: list(login(`, previous_key: "`+rotNotifyKey+`"`), notify("")),
			want: loginKey + ".previous_key: same key as producer notify"},
		{name: "producer: another producer's previous key",
			producers: list(login(`, previous_key: "`+rotNotifyOld+`"`), notify(`, previous_key_sha256: "`+sha256Hex(rotNotifyOld)+`"`)),
			want:      notifyKey + ".previous_key_sha256: same key as producer login's previous_key"},
		{name: "producer: the admin key", producers: list(login(""), notify(`, previous_key: "`+rotAdminKey+`"`)),
			want: notifyKey + ".previous_key: same key as admin.key"},
		{name: "producer: from SMSGW_PRODUCERS", env: []string{"SMSGW_PRODUCERS=" + list(login(`, previous_key: "short-old"`))},
			want: loginKey + ".previous_key: must be at least 16 characters"},

		// The admin's previous key.
		{name: "admin: clear and sha256 both", admin: `{key: "` + rotAdminKey + `", previous_key: "` + rotAdminOld + `", previous_key_sha256: "` + sha256Hex(rotAdminOld) + `"}`,
			want: "admin.previous_key: set previous_key or previous_key_sha256, not both"},
		{name: "admin: sha256 not hex", admin: `{key: "` + rotAdminKey + `", previous_key_sha256: "` + rotAdminOld + `"}`,
			want: "admin.previous_key_sha256: must be 64 hex characters"},
		{name: "admin: too short", admin: `{key: "` + rotAdminKey + `", previous_key: "short-old"}`,
			want: "admin.previous_key: must be at least 16 characters"},
		{name: "admin: equal to the admin key", admin: `{key_sha256: "` + sha256Hex(rotAdminKey) + `", previous_key: "` + rotAdminKey + `"}`,
			want: "admin.previous_key: must differ from the current key"},
		{name: "admin: a producer's key", admin: `{key: "` + rotAdminKey + `", previous_key: "` + rotNotifyKey + `"}`,
			want: "admin.previous_key: same key as producer notify"},
		{name: "admin: a producer's previous key", producers: list(login(""), notify(`, previous_key: "`+rotNotifyOld+`"`)),
			admin: `{key: "` + rotAdminKey + `", previous_key_sha256: "` + sha256Hex(rotNotifyOld) + `"}`,
			want:  "admin.previous_key_sha256: same key as producer notify's previous_key"},
		{name: "admin: without an admin key", admin: `{previous_key: "` + rotAdminOld + `"}`,
			want: "admin.previous_key: is only used beside admin.key or admin.key_sha256"},
		{name: "admin: from SMSGW_ADMIN_PREVIOUS_KEY", env: []string{"SMSGW_ADMIN_PREVIOUS_KEY=" + rotAdminKey},
			want: "admin.previous_key: must differ from the current key"},
		{name: "admin: from SMSGW_ADMIN_PREVIOUS_KEY_SHA256", env: []string{"SMSGW_ADMIN_PREVIOUS_KEY_SHA256=0123"},
			want: "admin.previous_key_sha256: must be 64 hex characters"},
		{name: "admin and a producer named admin both rotating",
			producers: list(login(""), notify(""), `{name: admin, key: "admin-producer-0123456789", previous_key: "admin-producer-old-01234", classes: [otp], rate: 1, burst: 1}`),
			admin:     `{key: "` + rotAdminKey + `", previous_key: "` + rotAdminOld + `"}`,
			want:      "producers[2] (admin).previous_key: a producer named admin cannot rotate its key while admin.previous_key is set too"},

		// The generic adapter's previous receipt secret.
		{name: "receipt: equal to receipt_secret", provider: `{url: "http://127.0.0.1:9100/send", receipt_secret: "` + rotReceipt + `", previous_receipt_secret: "` + rotReceipt + `"}`,
			want: "provider.previous_receipt_secret: must differ from provider.receipt_secret"},
		{name: "receipt: without receipt_secret", provider: `{url: "http://127.0.0.1:9100/send", previous_receipt_secret: "` + rotReceiptOld + `"}`,
			want: "provider.previous_receipt_secret: is only used beside provider.receipt_secret"},
		{name: "receipt: another adapter",
			provider: `{kind: vonage, vonage: {api_key: k, api_secret: s, from: ACME}, receipt_secret: "` + rotReceipt + `", previous_receipt_secret: "` + rotReceiptOld + `"}`,
			want:     "provider.previous_receipt_secret: is only read by the http adapter (provider.kind is vonage)"},
		{name: "receipt: from SMSGW_PROVIDER_PREVIOUS_RECEIPT_SECRET", env: []string{"SMSGW_PROVIDER_PREVIOUS_RECEIPT_SECRET=" + rotReceipt},
			want: "provider.previous_receipt_secret: must differ from provider.receipt_secret"},
	} {
		_, err := Load(rotationDoc(c.producers, c.admin, c.provider), c.env)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant an error with %q", c.name, err, c.want)
			continue
		}
		noSecrets(t, c.name, err.Error())
	}
}

// Each new key can be set by its environment variable like any other:
// the producers' inside SMSGW_PRODUCERS (as their keys are), the admin's
// and the receipt secret's by their own names, verbatim.
func TestPreviousKeysFromEnv(t *testing.T) {
	digest := sha256Hex(rotAdminOld)
	cfg, err := Load(rotationDoc("", "", ""), []string{
		"SMSGW_PRODUCERS=[{name: login, key: " + rotLoginKey + ", previous_key: " + rotLoginOld + ", classes: [otp], rate: 1, burst: 1}," +
			" {name: notify, key: " + rotNotifyKey + ", previous_key_sha256: '" + sha256Hex(rotNotifyOld) + "', classes: [otp], rate: 1, burst: 1}]",
		"SMSGW_ADMIN_PREVIOUS_KEY_SHA256=" + digest,
		"SMSGW_PROVIDER_PREVIOUS_RECEIPT_SECRET=" + rotReceiptOld,
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Producers[0].PreviousKey != rotLoginOld || cfg.Producers[1].PreviousKeySHA256 != sha256Hex(rotNotifyOld) {
		t.Errorf("the producers' previous keys not taken from SMSGW_PRODUCERS")
	}
	if cfg.Admin.PreviousKeySHA256 != digest || cfg.Admin.PreviousKey != "" {
		t.Errorf("admin.previous_key_sha256 not taken from SMSGW_ADMIN_PREVIOUS_KEY_SHA256")
	}
	if cfg.Provider.PreviousReceiptSecret != rotReceiptOld {
		t.Errorf("provider.previous_receipt_secret not taken from SMSGW_PROVIDER_PREVIOUS_RECEIPT_SECRET")
	}

	// A string is taken as it is: an all-digit key stays one.
	digits := "01234567890123456789"
	cfg, err = Load(rotationDoc("", "", ""), []string{"SMSGW_ADMIN_PREVIOUS_KEY=" + digits})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Admin.PreviousKey != digits {
		t.Errorf("SMSGW_ADMIN_PREVIOUS_KEY read as YAML")
	}
	// And removing the variable ends the rotation: nothing else keeps it.
	cfg, err = Load(rotationDoc("", "", ""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Rotations()) != 0 {
		t.Errorf("a rotation without its variables: %v", cfg.Rotations())
	}
}
