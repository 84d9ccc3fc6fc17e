// Package config is the gateway configuration: its types (this file), the
// product defaults (defaults.go), loading a YAML file with SMSGW_*
// environment overrides (load.go, env.go), the validation that names every
// bad key (validate.go) and the rewriting of YAML decoder errors so that
// they name keys too (yamlerr.go).
//
// Load applies, in order: Default, strict YAML (unknown keys rejected),
// environment overrides, Validate. A Config that Load returns is one that
// `smsgw serve` starts with: every rule a component would refuse at
// start-up is checked by Validate, so `smsgw check-config` reports it.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"smsgw/internal/limiter"
	"smsgw/internal/provider/httpprov"
	"smsgw/internal/provider/twilio"
	"smsgw/internal/provider/vonage"
	"smsgw/internal/sms"
)

// Config is the whole gateway configuration: one YAML file, every key
// overridable by an environment variable SMSGW_<PATH> (SMSGW_REDIS_ADDR).
type Config struct {
	Listen    string         `yaml:"listen"`
	Redis     RedisConfig    `yaml:"redis"`
	Store     StoreConfig    `yaml:"store"`
	Account   string         `yaml:"account"`
	Provider  ProviderConfig `yaml:"provider"`
	Limits    LimitsConfig   `yaml:"limits"`
	Producers []Producer     `yaml:"producers"`
	Admin     AdminConfig    `yaml:"admin"`
	Dispatch  DispatchConfig `yaml:"dispatch"`
	Messages  MessagesConfig `yaml:"messages"`
	Log       LogConfig      `yaml:"log"`
	HTTP      HTTPConfig     `yaml:"http"`
	Webhooks  WebhooksConfig `yaml:"webhooks"`

	Protection ProtectionConfig `yaml:"protection"`
}

// RedisConfig selects the shared backend. Empty Addr: embedded store and a
// local limiter (exactly one replica). One address: a single Redis (or, with
// MasterName, Sentinel addresses). Several comma-separated addresses: Redis
// Cluster seeds.
type RedisConfig struct {
	Addr       string        `yaml:"addr"`
	MasterName string        `yaml:"master_name"`
	Username   string        `yaml:"username"`
	Password   string        `yaml:"password"`
	DB         int           `yaml:"db"`
	TLS        bool          `yaml:"tls"`
	Timeout    time.Duration `yaml:"timeout"` // dial/read/write timeout
	// With TLS: the PEM file of the CA that signed the server's
	// certificate (empty: the system's roots), the name to check it
	// against (empty: the host of the address), and a client certificate
	// and its key (both or neither) for servers that ask for one.
	TLSCAFile     string `yaml:"tls_ca_file"`
	TLSServerName string `yaml:"tls_server_name"`
	TLSCertFile   string `yaml:"tls_cert_file"`
	TLSKeyFile    string `yaml:"tls_key_file"`
	// The Sentinels' own ACL user and password (master_name set), when
	// they differ from the master's (username, password). Never logged.
	SentinelUsername string `yaml:"sentinel_username"`
	SentinelPassword string `yaml:"sentinel_password"`
	// WaitReplicas > 0: an enqueue is answered 202 only once that many
	// replicas of the Redis master hold it (WAIT), so a failover right
	// after cannot lose it; when they do not confirm within WaitTimeout
	// the request is answered 503 (the message may still be stored: a
	// retry with the same Idempotency-Key finds it). 0: asynchronous
	// replication, a failover may lose the last accepted messages
	// (docs/scale.md section 3).
	WaitReplicas int           `yaml:"wait_replicas"`
	WaitTimeout  time.Duration `yaml:"wait_timeout"`
}

// Addrs splits Addr into its comma-separated addresses.
func (r RedisConfig) Addrs() []string {
	var out []string
	for _, a := range strings.Split(r.Addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Enabled reports whether Redis is configured.
func (r RedisConfig) Enabled() bool { return len(r.Addrs()) > 0 }

// StoreConfig places the embedded store.
type StoreConfig struct {
	Path string `yaml:"path"`
}

// ProviderConfig selects the provider adapter. Each adapter's own keys are
// its Settings type, validated by the adapter's rule.
type ProviderConfig struct {
	Kind string `yaml:"kind"` // http | twilio | vonage
	// HTTP holds url and token, which sit directly under provider: url is
	// the send endpoint for kind http and an optional API base URL
	// override for twilio and vonage; token is http's optional bearer.
	HTTP httpprov.Settings `yaml:",inline"`
	// Timeout bounds one send; 0: the adapter's default (see each
	// adapter's DefaultTimeout).
	Timeout       time.Duration `yaml:"timeout"`
	ContractRPS   float64       `yaml:"contract_rps"`
	CountSegments bool          `yaml:"count_segments"`

	Twilio twilio.Settings `yaml:"twilio"`
	Vonage vonage.Settings `yaml:"vonage"`

	// ReceiptSecret keys the HMAC-SHA256 of the generic adapter's delivery
	// receipts (X-Smsgw-Receipt-Signature); empty: receipts are refused.
	// Never logged.
	ReceiptSecret string `yaml:"receipt_secret"`
	// PreviousReceiptSecret, while the receipt secret is rotated, is the
	// secret ReceiptSecret replaces: a receipt signed with either is taken
	// (kind http only). Empty: only ReceiptSecret. Never logged.
	PreviousReceiptSecret string `yaml:"previous_receipt_secret"`
	// ReceiptURL is the public URL of this gateway's receipts endpoint for
	// the provider, as the provider reaches it (behind a proxy it differs
	// from what the gateway sees), e.g.
	// https://sms.example.com/v1/receipts/twilio. Twilio: sent as each
	// message's StatusCallback and the URL its signature covers; receipts
	// are refused without it.
	ReceiptURL string `yaml:"receipt_url"`
	// InboundURL is the public URL of this gateway's inbound-message
	// endpoint as the provider reaches it, e.g.
	// https://sms.example.com/v1/inbound/twilio. Twilio: the URL its
	// signature of an incoming message covers (configure the same one on
	// the number or messaging service); inbound messages are refused
	// without it. The generic and Vonage adapters sign without the URL and
	// do not need it.
	InboundURL string `yaml:"inbound_url"`
}

// LimitsConfig paces sends to the provider.
type LimitsConfig struct {
	TargetRPS  float64                `yaml:"target_rps"`
	Burst      int                    `yaml:"burst"`
	MaxSenders int                    `yaml:"max_senders"` // the most gateway processes that may ever run; fallback rate = target_rps / max_senders
	Classes    map[string]ClassLimits `yaml:"classes"`
	// Senders limits some senders (a send's "from": a number, an
	// alphanumeric id or a Twilio Messaging Service SID) below the
	// account's rate, as the provider limits them.
	Senders map[string]SenderLimits `yaml:"senders"`
}

// SenderRates is limits.senders as sender -> max_rps.
func (c Config) SenderRates() map[string]float64 {
	out := make(map[string]float64, len(c.Limits.Senders))
	for s, l := range c.Limits.Senders {
		out[s] = l.MaxRPS
	}
	return out
}

// SenderLimits is the provider's limit of one sender.
type SenderLimits struct {
	MaxRPS float64 `yaml:"max_rps"`
	Burst  int     `yaml:"burst"` // 0: 1
}

// ClassLimits caps one class below the global rate.
type ClassLimits struct {
	MaxRPS float64 `yaml:"max_rps"`
	Burst  int     `yaml:"burst"` // 0: the global burst
	// QuietHours holds the class's messages while it is night for the
	// recipient (marketing only).
	QuietHours QuietHoursConfig `yaml:"quiet_hours,omitempty"`
}

// QuietHoursConfig is a daily window of the recipient's local time,
// "HH:MM" to "HH:MM", across midnight when to is earlier than from.
type QuietHoursConfig struct {
	From string `yaml:"from"`
	To   string `yaml:"to"`
}

// Set reports whether the window is configured.
func (q QuietHoursConfig) Set() bool { return q.From != "" || q.To != "" }

// QuietPolicy is the quiet hours of every class that has them, from a
// configuration Validate accepted.
func (c Config) QuietPolicy() sms.QuietPolicy {
	p := sms.QuietPolicy{}
	for name, cl := range c.Limits.Classes {
		cls, err := sms.ParseClass(name)
		if err != nil || !cl.QuietHours.Set() {
			continue
		}
		if q, err := sms.NewQuietHours(cl.QuietHours.From, cl.QuietHours.To); err == nil {
			p[cls] = q
		}
	}
	return p
}

// SegmentsPerMessage is the most segments a message of class may have,
// and the key that bounds it. When segments are counted
// (provider.count_segments) a message costs its segments in the provider
// limiter, which never grants more than the smallest burst of the keys
// the class passes (limits.burst, or limits.classes.<class>.burst when
// set and smaller): the effective maximum is the least of that and
// messages.max_segments. With the defaults it is 5 (limits.burst).
func (c Config) SegmentsPerMessage(class string) (int, string) {
	most, key := c.Messages.MaxSegments, "messages.max_segments"
	if !c.Provider.CountSegments {
		return most, key
	}
	b, bkey := c.Limits.Burst, "limits.burst"
	if cl, ok := c.Limits.Classes[class]; ok && cl.Burst > 0 && cl.Burst < b {
		b, bkey = cl.Burst, "limits.classes."+class+".burst"
	}
	if b < most {
		return b, bkey
	}
	return most, key
}

// OpenSenders names the producers with no senders: they may send as any
// sender id (from), which a leaked key makes anyone's to use. Start-up
// warns about them and check-config lists them.
func (c Config) OpenSenders() []string {
	var out []string
	for _, p := range c.Producers {
		if len(p.Senders) == 0 {
			out = append(out, p.Name)
		}
	}
	return out
}

// SegmentsSummary says how many segments a message may have and which key
// bounds it, per class when classes differ: with counted segments the
// limiter's burst, when below messages.max_segments, is the maximum.
func (c Config) SegmentsSummary() string {
	say := func(most int, key string) string {
		if key == "messages.max_segments" {
			return fmt.Sprintf("at most %d per message (%s)", most, key)
		}
		return fmt.Sprintf("at most %d per message (%s; messages.max_segments %d is not reached)", most, key, c.Messages.MaxSegments)
	}
	most, key := c.SegmentsPerMessage(sms.ClassOTP.String())
	var parts []string
	same := true
	for _, cls := range sms.Classes {
		m, k := c.SegmentsPerMessage(cls.String())
		same = same && m == most && k == key
		parts = append(parts, cls.String()+" "+say(m, k))
	}
	if same {
		return say(most, key)
	}
	return strings.Join(parts, "; ")
}

// Producer is one system allowed to post messages.
type Producer struct {
	Name      string `yaml:"name"`
	Key       string `yaml:"key"`        // the bearer key in clear, or
	KeySHA256 string `yaml:"key_sha256"` // its SHA-256 in hex
	// PreviousKey (or PreviousKeySHA256), while the producer's key is
	// rotated, is the key Key replaces: a request bearing either is the
	// producer's. Empty: only Key.
	PreviousKey       string   `yaml:"previous_key"`
	PreviousKeySHA256 string   `yaml:"previous_key_sha256"`
	Classes           []string `yaml:"classes"`
	Rate              float64  `yaml:"rate"`            // ingress messages/s
	Burst             int      `yaml:"burst"`           // ingress burst
	MaxOutstanding    int64    `yaml:"max_outstanding"` // queued + in flight; 0 = no limit
	// MaxKeyedPerDay bounds the requests with an Idempotency-Key the
	// producer may make in a day, each a first answer kept for the
	// idempotency window: 0, DefaultMaxKeyedPerDay.
	MaxKeyedPerDay int64 `yaml:"max_keyed_per_day"`
	// Senders are the sender ids (from) the producer may use; the first is
	// its default. Empty: any valid sender, and none by default.
	Senders []string `yaml:"senders"`
	// SenderPools are, by class, the senders a message of the class that
	// names no from is sent from (senderpools.go); a class without a pool
	// uses the first of Senders.
	SenderPools map[string][]string `yaml:"sender_pools"`
	// SenderPoolStickyFor is how long a recipient keeps the pool sender it
	// was last sent from, after the last message to it; 0:
	// DefaultSenderPoolStickyFor.
	SenderPoolStickyFor time.Duration `yaml:"sender_pool_sticky_for"`
	// AllowUnicodeControls lets the producer's bodies carry bidirectional
	// and zero-width format characters, refused otherwise.
	AllowUnicodeControls bool `yaml:"allow_unicode_controls"`
	// Webhook is where the producer's status callbacks go; absent: none,
	// unless a message names its own callback_url (under Webhook.Allow).
	Webhook WebhookConfig `yaml:"webhook"`
	// Budget caps the units the producer may spend a day and a month
	// (budget.go); zero: no cap.
	Budget BudgetConfig `yaml:"budget"`
}

// WebhookConfig is one producer's status callback destination (Standard
// Webhooks). Secret signs every event; it is never logged or stored.
type WebhookConfig struct {
	URL    string `yaml:"url"`    // default destination of every event; empty: only per-message callback_url
	Secret string `yaml:"secret"` // "whsec_" + base64 of the key bytes
	// PreviousSecret, while a rotation is under way, is the secret Secret
	// replaces: every event is then signed with both, Secret's signature
	// first, so a producer can verify with either. Empty: one signature.
	PreviousSecret string `yaml:"previous_secret"`
	// Allow lists the URL prefixes a message's callback_url may start with;
	// empty: no per-message callback_url.
	Allow []string `yaml:"allow"`
	// AllowNetworks, when set, are the CIDRs this producer's callbacks may
	// reach although private, loopback or link-local, in place of
	// webhooks.allow_networks; empty: webhooks.allow_networks.
	AllowNetworks []string `yaml:"allow_networks"`
}

// Enabled reports whether the producer can receive callbacks at all.
func (w WebhookConfig) Enabled() bool { return w.URL != "" || len(w.Allow) > 0 }

// WebhooksConfig tunes the delivery of status callbacks to producers.
type WebhooksConfig struct {
	// AllowNetworks are CIDRs a callback may reach although they are
	// private, loopback or link-local (refused by default: SSRF).
	AllowNetworks []string      `yaml:"allow_networks"`
	Timeout       time.Duration `yaml:"timeout"`     // one delivery attempt
	MaxAge        time.Duration `yaml:"max_age"`     // retried until then, then dead
	Concurrency   int           `yaml:"concurrency"` // deliveries in flight per endpoint (scheme://host:port)
	Workers       int           `yaml:"workers"`     // deliveries in flight per replica, all endpoints
	BackoffBase   time.Duration `yaml:"backoff_base"`
	BackoffMax    time.Duration `yaml:"backoff_max"`
	// BreakerFailures consecutive failures of one endpoint open its
	// breaker for BreakerOpen: its events wait, nobody else's do.
	BreakerFailures int           `yaml:"breaker_failures"`
	BreakerOpen     time.Duration `yaml:"breaker_open"`
}

// DefaultMaxKeyedPerDay is producers[].max_keyed_per_day when it is 0:
// about 0.6 GB of Redis a day at the ≈ 600 B a keyed message keeps
// (docs/operations.md, "What stays per message").
const DefaultMaxKeyedPerDay = 1_000_000

// MaxMaxKeyedPerDay is the largest producers[].max_keyed_per_day.
const MaxMaxKeyedPerDay = 100_000_000

// KeyedRate is the producer's quota of keyed requests: max_keyed_per_day
// (0: DefaultMaxKeyedPerDay) a day, all of it at once.
func (p Producer) KeyedRate() limiter.Rate {
	n := p.MaxKeyedPerDay
	if n == 0 {
		n = DefaultMaxKeyedPerDay
	}
	return limiter.Rate{PerSecond: float64(n) / (24 * 60 * 60), Burst: int(n)}
}

// KeyHash returns the SHA-256 of the producer's key.
func (p Producer) KeyHash() [32]byte { return keyHash(p.Key, p.KeySHA256) }

// Rotating reports whether the producer has a previous key.
func (p Producer) Rotating() bool { return p.PreviousKey != "" || p.PreviousKeySHA256 != "" }

// PreviousKeyHash returns the SHA-256 of the producer's previous key.
func (p Producer) PreviousKeyHash() [32]byte { return keyHash(p.PreviousKey, p.PreviousKeySHA256) }

// AdminConfig holds the key of the admin endpoints.
type AdminConfig struct {
	Key       string `yaml:"key"`
	KeySHA256 string `yaml:"key_sha256"`
	// PreviousKey (or PreviousKeySHA256), while the admin key is rotated,
	// is the key Key replaces: either one is the admin's. Empty: only Key.
	PreviousKey       string `yaml:"previous_key"`
	PreviousKeySHA256 string `yaml:"previous_key_sha256"`
	// Listen, when set, is a second listener for the operator endpoints
	// (/metrics, /v1/admin/*, the dashboard), which the main listener then
	// does not serve: a network policy can keep them off the producers' path.
	Listen string `yaml:"listen"`
}

// Enabled reports whether admin endpoints are reachable at all.
func (a AdminConfig) Enabled() bool { return a.Key != "" || a.KeySHA256 != "" }

// KeyHash returns the SHA-256 of the admin key.
func (a AdminConfig) KeyHash() [32]byte { return keyHash(a.Key, a.KeySHA256) }

// Rotating reports whether the admin has a previous key.
func (a AdminConfig) Rotating() bool { return a.PreviousKey != "" || a.PreviousKeySHA256 != "" }

// PreviousKeyHash returns the SHA-256 of the admin's previous key.
func (a AdminConfig) PreviousKeyHash() [32]byte { return keyHash(a.PreviousKey, a.PreviousKeySHA256) }

func keyHash(clear, hexHash string) [32]byte {
	if clear != "" {
		return sha256.Sum256([]byte(clear))
	}
	var out [32]byte
	b, _ := hex.DecodeString(hexHash)
	copy(out[:], b)
	return out
}

// DispatchConfig tunes the send loop.
type DispatchConfig struct {
	Workers         int                   `yaml:"workers"`     // concurrent provider sends for all classes
	OTPWorkers      int                   `yaml:"otp_workers"` // extra senders that only ever take OTP
	Lease           time.Duration         `yaml:"lease"`
	MaxAttempts     int                   `yaml:"max_attempts"`
	PoisonAfter     int                   `yaml:"poison_after"` // sender crashes on one message before it is a dead letter ("poison")
	BackoffBase     time.Duration         `yaml:"backoff_base"`
	BackoffMax      time.Duration         `yaml:"backoff_max"`
	ShutdownTimeout time.Duration         `yaml:"shutdown_timeout"`
	SuspensionGuard SuspensionGuardConfig `yaml:"suspension_guard"`
}

// SuspensionGuardConfig mirrors the provider's suspension rule.
type SuspensionGuardConfig struct {
	Threshold int           `yaml:"threshold"` // provider suspends after this many 429s ...
	Window    time.Duration `yaml:"window"`    // ... within this rolling window
	Share     float64       `yaml:"share"`     // act when our 429s pass this share of Threshold
}

// MessagesConfig bounds what producers may send.
type MessagesConfig struct {
	MaxSegments int           `yaml:"max_segments"`
	DefaultTTL  time.Duration `yaml:"default_ttl"` // 0: messages never expire unless the producer sets ttl_seconds
	MaxTTL      time.Duration `yaml:"max_ttl"`
	Retention   time.Duration `yaml:"retention"` // how long finished messages stay readable by id; at least IdempotencyWindow
	OTPDeadline time.Duration `yaml:"otp_deadline"`
}

// Fixed by the API contract (api/openapi.yaml), not configurable; the
// rules of Validate depend on them.
const (
	// IdempotencyWindow is how long an Idempotency-Key maps to its first
	// answer.
	IdempotencyWindow = 24 * time.Hour
	// MaxOTPDeadline is the longest a producer may ask POST /v1/otp to
	// try (deadline_ms).
	MaxOTPDeadline = 5 * time.Second
)

// LogConfig shapes the process log.
type LogConfig struct {
	Level  string `yaml:"level"`  // debug | info | warn | error
	Format string `yaml:"format"` // json | text
}

// HTTPConfig tunes the HTTP edge.
type HTTPConfig struct {
	MaxBodyBytes   int64         `yaml:"max_body_bytes"`
	ReadTimeout    time.Duration `yaml:"read_timeout"`
	WriteTimeout   time.Duration `yaml:"write_timeout"`
	TrustedProxies []string      `yaml:"trusted_proxies"` // CIDRs whose X-Forwarded-For is believed
	// IdleTimeout closes a keep-alive connection idle this long.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxConnections bounds the open connections of each listener (the
	// producers' and admin.listen's); past it a new connection waits in
	// the kernel's queue until one closes.
	MaxConnections int `yaml:"max_connections"`
	// BodyBytesInFlight bounds the request-body bytes of producers' message
	// requests being read or processed at once in the process, and
	// BodyBytesInFlightPerProducer those of one producer: over either, 503.
	BodyBytesInFlight            int64 `yaml:"body_bytes_in_flight"`
	BodyBytesInFlightPerProducer int64 `yaml:"body_bytes_in_flight_per_producer"`
}
