package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"smsgw/internal/keyspace"
	"smsgw/internal/sms"
)

// Config is the whole gateway configuration: one YAML file, every key
// overridable by an environment variable SMSGW_<PATH> (SMSGW_REDIS_ADDR).
// Load applies, in order: defaults, strict YAML (unknown keys rejected),
// environment overrides, Validate.
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

type StoreConfig struct {
	Path string `yaml:"path"`
}

// ProviderConfig selects the provider adapter.
type ProviderConfig struct {
	Kind          string        `yaml:"kind"` // http | twilio | vonage | sim
	URL           string        `yaml:"url"`  // http: the send endpoint; twilio/vonage: optional API base URL override
	Timeout       time.Duration `yaml:"timeout"`
	ContractRPS   float64       `yaml:"contract_rps"`
	CountSegments bool          `yaml:"count_segments"`
	Token         string        `yaml:"token"` // http: optional bearer token sent to the provider

	Twilio TwilioConfig `yaml:"twilio"`
	Vonage VonageConfig `yaml:"vonage"`
}

type TwilioConfig struct {
	AccountSID          string `yaml:"account_sid"`
	AuthToken           string `yaml:"auth_token"`
	From                string `yaml:"from"`
	MessagingServiceSID string `yaml:"messaging_service_sid"`
}

type VonageConfig struct {
	APIKey    string `yaml:"api_key"`
	APISecret string `yaml:"api_secret"`
	From      string `yaml:"from"`
}

// LimitsConfig paces sends to the provider.
type LimitsConfig struct {
	TargetRPS  float64                `yaml:"target_rps"`
	Burst      int                    `yaml:"burst"`
	MaxSenders int                    `yaml:"max_senders"` // the most gateway processes that may ever run; fallback rate = target_rps / max_senders
	Classes    map[string]ClassLimits `yaml:"classes"`
}

type ClassLimits struct {
	MaxRPS float64 `yaml:"max_rps"`
	Burst  int     `yaml:"burst"` // 0: the global burst
}

// Producer is one system allowed to post messages.
type Producer struct {
	Name           string   `yaml:"name"`
	Key            string   `yaml:"key"`        // the bearer key in clear, or
	KeySHA256      string   `yaml:"key_sha256"` // its SHA-256 in hex
	Classes        []string `yaml:"classes"`
	Rate           float64  `yaml:"rate"`            // ingress messages/s
	Burst          int      `yaml:"burst"`           // ingress burst
	MaxOutstanding int64    `yaml:"max_outstanding"` // queued + in flight; 0 = no limit
}

// KeyHash returns the SHA-256 of the producer's key.
func (p Producer) KeyHash() [32]byte { return keyHash(p.Key, p.KeySHA256) }

type AdminConfig struct {
	Key       string `yaml:"key"`
	KeySHA256 string `yaml:"key_sha256"`
}

// Enabled reports whether admin endpoints are reachable at all.
func (a AdminConfig) Enabled() bool { return a.Key != "" || a.KeySHA256 != "" }

// KeyHash returns the SHA-256 of the admin key.
func (a AdminConfig) KeyHash() [32]byte { return keyHash(a.Key, a.KeySHA256) }

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
	Retention   time.Duration `yaml:"retention"` // how long finished messages stay readable by id
	OTPDeadline time.Duration `yaml:"otp_deadline"`
}

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
}

// Default returns the configuration every file starts from.
func Default() Config {
	return Config{
		Listen:  ":8080",
		Redis:   RedisConfig{Timeout: 500 * time.Millisecond},
		Store:   StoreConfig{Path: "./smsgw-data"},
		Account: "main",
		Provider: ProviderConfig{
			Kind:          "http",
			Timeout:       5 * time.Second,
			ContractRPS:   100,
			CountSegments: true,
		},
		Limits: LimitsConfig{
			TargetRPS:  90,
			Burst:      5,
			MaxSenders: 23,
			Classes:    map[string]ClassLimits{"marketing": {MaxRPS: 70}},
		},
		Dispatch: DispatchConfig{
			Workers:         16,
			OTPWorkers:      4,
			Lease:           30 * time.Second,
			MaxAttempts:     8,
			BackoffBase:     time.Second,
			BackoffMax:      5 * time.Minute,
			ShutdownTimeout: 20 * time.Second,
			SuspensionGuard: SuspensionGuardConfig{Threshold: 300, Window: 10 * time.Minute, Share: 0.5},
		},
		Messages: MessagesConfig{
			MaxSegments: 10,
			DefaultTTL:  24 * time.Hour,
			MaxTTL:      72 * time.Hour,
			Retention:   7 * 24 * time.Hour,
			OTPDeadline: time.Second,
		},
		Log: LogConfig{Level: "info", Format: "json"},
		HTTP: HTTPConfig{
			MaxBodyBytes: 1 << 20,
			ReadTimeout:  10 * time.Second,
			WriteTimeout: 30 * time.Second,
		},
	}
}

// EnvPrefix starts every environment override.
const EnvPrefix = "SMSGW_"

// LoadFile reads the YAML file at path (empty path: defaults only) and
// applies the environment of the process.
func LoadFile(path string) (Config, error) {
	var data []byte
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
		data = b
	}
	return Load(data, os.Environ())
}

// Load builds a Config from YAML bytes and an environment (KEY=VALUE list):
// defaults, strict decode, env overrides, Validate. Errors name the key.
func Load(data []byte, environ []string) (Config, error) {
	cfg := Default()
	if len(bytes.TrimSpace(data)) > 0 {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			return Config{}, fmt.Errorf("config: %s", nameKeysInYAMLError(data, err))
		}
		// A second document is almost always a mistake (a stray ---).
		var extra any
		if err := dec.Decode(&extra); err == nil {
			return Config{}, errors.New("config: more than one YAML document")
		}
	}
	if err := applyEnv(&cfg, environ); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// envPaths lists every overridable key path of Config, as yaml paths
// ("limits.classes.marketing.max_rps") mapped to the field.
func envPaths(v reflect.Value, prefix string, out map[string]reflect.Value) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		path := tag
		if prefix != "" {
			path = prefix + "." + tag
		}
		fv := v.Field(i)
		switch {
		case f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)):
			out[path] = fv
			envPaths(fv, path, out)
		case f.Type.Kind() == reflect.Map && f.Type.Elem().Kind() == reflect.Struct:
			out[path] = fv
			// Maps keyed by class: every class name is a possible key.
			for _, c := range sms.Classes {
				out[path+"."+c.String()] = reflect.Value{} // marker: map entry, handled in applyEnv
				et := f.Type.Elem()
				for j := 0; j < et.NumField(); j++ {
					sub := strings.Split(et.Field(j).Tag.Get("yaml"), ",")[0]
					out[path+"."+c.String()+"."+sub] = reflect.Value{}
				}
			}
		default:
			out[path] = fv
		}
	}
}

func envName(path string) string {
	return EnvPrefix + strings.ToUpper(strings.NewReplacer(".", "_").Replace(path))
}

// applyEnv overrides keys from SMSGW_* variables. The value is parsed as YAML
// into the field, so scalars, durations ("5s") and lists
// (SMSGW_PRODUCERS='[{name: a, ...}]') all work. An SMSGW_ variable that
// names no key is an error: a typo must not be silently ignored.
func applyEnv(cfg *Config, environ []string) error {
	paths := map[string]reflect.Value{}
	envPaths(reflect.ValueOf(cfg).Elem(), "", paths)
	byEnv := map[string]string{}
	for p := range paths {
		byEnv[envName(p)] = p
	}
	var errs []error
	// Apply in a stable order: shorter paths (whole sections) before the
	// keys inside them, so SMSGW_LIMITS then SMSGW_LIMITS_BURST composes.
	type kv struct{ name, path, val string }
	var todo []kv
	for _, e := range environ {
		name, val, ok := strings.Cut(e, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		p, known := byEnv[name]
		if !known {
			if isReservedEnv(name) {
				continue
			}
			errs = append(errs, fmt.Errorf("%s: environment variable names no configuration key", name))
			continue
		}
		todo = append(todo, kv{name, p, val})
	}
	slices.SortFunc(todo, func(a, b kv) int { return len(a.path) - len(b.path) })
	for _, x := range todo {
		// A string key takes the value as it is: parsed as YAML, a password
		// "0123" would become 83 and a hex digest of digits a float.
		if f := paths[x.path]; f.IsValid() && f.Kind() == reflect.String {
			f.SetString(x.val)
			continue
		}
		if err := setPath(cfg, x.path, x.val); err != nil {
			errs = append(errs, fmt.Errorf("%s (from %s): %w", x.path, x.name, err))
		}
	}
	return joinConfigErrors(errs)
}

// isReservedEnv lets variables that are not configuration keys but are
// read elsewhere (tests, the CLI) share the prefix.
func isReservedEnv(name string) bool {
	return name == "SMSGW_CONFIG" || strings.HasPrefix(name, "SMSGW_SKIP_") || strings.HasPrefix(name, "SMSGW_TEST_")
}

// setPath decodes val as YAML into the key at path, by rebuilding a small
// YAML document around it and decoding strictly on top of cfg.
func setPath(cfg *Config, path, val string) error {
	parts := strings.Split(path, ".")
	var node any = yamlScalarOrValue(val)
	if len(parts) == 4 && parts[0] == "limits" && parts[1] == "classes" {
		// yaml decodes a map entry afresh; carry the entry's other fields
		// so SMSGW_LIMITS_CLASSES_MARKETING_BURST keeps max_rps.
		cur := cfg.Limits.Classes[parts[2]]
		entry := map[string]any{"max_rps": cur.MaxRPS, "burst": cur.Burst, parts[3]: node}
		node = map[string]any{"limits": map[string]any{"classes": map[string]any{parts[2]: entry}}}
		parts = nil
	}
	for i := len(parts) - 1; i >= 0; i-- {
		node = map[string]any{parts[i]: node}
	}
	doc, err := yaml.Marshal(node)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	return nil
}

// yamlScalarOrValue parses val as YAML so that lists and maps in an
// environment variable work; a value that is not valid YAML is taken as a
// plain string.
func yamlScalarOrValue(val string) any {
	var v any
	if err := yaml.Unmarshal([]byte(val), &v); err != nil || v == nil {
		return val
	}
	return v
}

// Validate checks every key and reports all problems at once, each naming
// its key.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...)))
	}

	if c.Listen == "" {
		bad("listen", "must not be empty (for example \":8080\")")
	} else if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("listen", "%q is not host:port: %v", c.Listen, err)
	}

	if c.Redis.Enabled() {
		for _, a := range c.Redis.Addrs() {
			if _, _, err := net.SplitHostPort(a); err != nil {
				bad("redis.addr", "%q is not host:port", a)
			}
		}
	} else if c.Redis.MasterName != "" {
		bad("redis.master_name", "needs redis.addr (the Sentinel addresses)")
	}
	if c.Redis.DB < 0 {
		bad("redis.db", "must be >= 0")
	}
	if c.Redis.DB != 0 && len(c.Redis.Addrs()) > 1 && c.Redis.MasterName == "" {
		bad("redis.db", "Redis Cluster has only database 0")
	}
	if c.Redis.Timeout <= 0 {
		bad("redis.timeout", "must be > 0")
	}
	if !c.Redis.Enabled() && c.Store.Path == "" {
		bad("store.path", "must be set when redis.addr is empty (the embedded store needs a directory)")
	}
	if err := keyspace.ValidateAccount(c.Account); err != nil {
		bad("account", "%v", err)
	}

	c.validateProvider(bad)
	c.validateLimits(bad)
	c.validateProducers(bad)

	if c.Admin.Key != "" && c.Admin.KeySHA256 != "" {
		bad("admin", "set key or key_sha256, not both")
	}
	if c.Admin.KeySHA256 != "" && !isSHA256Hex(c.Admin.KeySHA256) {
		bad("admin.key_sha256", "must be 64 hex characters")
	}
	if c.Admin.Key != "" && len(c.Admin.Key) < 16 {
		bad("admin.key", "must be at least 16 characters")
	}

	d := c.Dispatch
	if d.Workers < 1 {
		bad("dispatch.workers", "must be >= 1")
	}
	if d.OTPWorkers < 0 {
		bad("dispatch.otp_workers", "must be >= 0")
	}
	if d.Lease < time.Second {
		bad("dispatch.lease", "must be at least 1s (got %s)", d.Lease)
	}
	if d.MaxAttempts < 1 {
		bad("dispatch.max_attempts", "must be >= 1")
	}
	if d.BackoffBase <= 0 {
		bad("dispatch.backoff_base", "must be > 0")
	}
	if d.BackoffMax < d.BackoffBase {
		bad("dispatch.backoff_max", "must be >= dispatch.backoff_base")
	}
	if d.ShutdownTimeout <= 0 {
		bad("dispatch.shutdown_timeout", "must be > 0")
	}
	g := d.SuspensionGuard
	if g.Threshold < 1 {
		bad("dispatch.suspension_guard.threshold", "must be >= 1")
	}
	if g.Window <= 0 {
		bad("dispatch.suspension_guard.window", "must be > 0")
	}
	if g.Share <= 0 || g.Share >= 1 {
		bad("dispatch.suspension_guard.share", "must be between 0 and 1 (exclusive), got %g", g.Share)
	}

	m := c.Messages
	if m.MaxSegments < 1 || m.MaxSegments > 255 {
		bad("messages.max_segments", "must be between 1 and 255")
	}
	if m.DefaultTTL < 0 {
		bad("messages.default_ttl", "must be >= 0")
	}
	if m.MaxTTL <= 0 {
		bad("messages.max_ttl", "must be > 0")
	} else if m.DefaultTTL > m.MaxTTL {
		bad("messages.default_ttl", "must be <= messages.max_ttl (%s)", m.MaxTTL)
	}
	if m.Retention < time.Minute {
		bad("messages.retention", "must be at least 1m")
	}
	if m.OTPDeadline <= 0 || m.OTPDeadline > 5*time.Second {
		bad("messages.otp_deadline", "must be in (0, 5s]")
	}

	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		bad("log.format", "%q is not one of json, text", c.Log.Format)
	}

	if c.HTTP.MaxBodyBytes < 1024 {
		bad("http.max_body_bytes", "must be at least 1024")
	}
	if c.HTTP.ReadTimeout <= 0 {
		bad("http.read_timeout", "must be > 0")
	}
	if c.HTTP.WriteTimeout <= 0 {
		bad("http.write_timeout", "must be > 0")
	}
	for i, p := range c.HTTP.TrustedProxies {
		if _, _, err := net.ParseCIDR(p); err != nil {
			bad(fmt.Sprintf("http.trusted_proxies[%d]", i), "%q is not a CIDR", p)
		}
	}
	return joinConfigErrors(errs)
}

func (c *Config) validateProvider(bad func(key, format string, a ...any)) {
	p := c.Provider
	switch p.Kind {
	case "http":
		if p.URL == "" {
			bad("provider.url", "must be set for provider.kind http (smsgw refuses to start without a provider)")
		}
	case "twilio":
		if p.Twilio.AccountSID == "" {
			bad("provider.twilio.account_sid", "must be set for provider.kind twilio")
		}
		if p.Twilio.AuthToken == "" {
			bad("provider.twilio.auth_token", "must be set for provider.kind twilio")
		}
		if p.Twilio.From == "" && p.Twilio.MessagingServiceSID == "" {
			bad("provider.twilio", "set from or messaging_service_sid")
		}
	case "vonage":
		if p.Vonage.APIKey == "" {
			bad("provider.vonage.api_key", "must be set for provider.kind vonage")
		}
		if p.Vonage.APISecret == "" {
			bad("provider.vonage.api_secret", "must be set for provider.kind vonage")
		}
	case "":
		bad("provider.kind", "must be set (http, twilio or vonage); smsgw refuses to start without a provider")
	default:
		bad("provider.kind", "%q is not one of http, twilio, vonage", p.Kind)
	}
	if p.URL != "" {
		if u, err := url.Parse(p.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("provider.url", "%q is not an http(s) URL", p.URL)
		}
	}
	if p.Timeout <= 0 {
		bad("provider.timeout", "must be > 0")
	}
	if p.ContractRPS <= 0 {
		bad("provider.contract_rps", "must be > 0")
	}
}

func (c *Config) validateLimits(bad func(key, format string, a ...any)) {
	l := c.Limits
	if l.TargetRPS <= 0 {
		bad("limits.target_rps", "must be > 0")
	} else if c.Provider.ContractRPS > 0 && l.TargetRPS > c.Provider.ContractRPS {
		bad("limits.target_rps", "%g exceeds provider.contract_rps %g", l.TargetRPS, c.Provider.ContractRPS)
	}
	if l.Burst < 1 {
		bad("limits.burst", "must be >= 1")
	} else if l.TargetRPS > 0 && c.Provider.ContractRPS > 0 && l.TargetRPS+float64(l.Burst) > c.Provider.ContractRPS {
		// GCRA bounds any interval t by rate·t + burst; over one second
		// that must stay within the contract however the provider measures.
		bad("limits.burst", "target_rps %g + burst %d exceeds provider.contract_rps %g in a one-second window",
			l.TargetRPS, l.Burst, c.Provider.ContractRPS)
	}
	if l.MaxSenders < 1 {
		bad("limits.max_senders", "must be >= 1")
	}
	for name, cl := range l.Classes {
		key := "limits.classes." + name
		cls, err := sms.ParseClass(name)
		if err != nil {
			bad(key, "unknown class (want otp, transactional or marketing)")
			continue
		}
		if cls == sms.ClassOTP {
			bad(key, "otp cannot be capped: it must always have the headroom the cap leaves")
		}
		if cl.MaxRPS <= 0 {
			bad(key+".max_rps", "must be > 0")
		} else if l.TargetRPS > 0 && cl.MaxRPS >= l.TargetRPS {
			bad(key+".max_rps", "%g must be below limits.target_rps %g so OTP keeps headroom", cl.MaxRPS, l.TargetRPS)
		}
		if cl.Burst < 0 {
			bad(key+".burst", "must be >= 0 (0 means limits.burst)")
		}
	}
}

func (c *Config) validateProducers(bad func(key, format string, a ...any)) {
	if len(c.Producers) == 0 {
		bad("producers", "must list at least one producer (nobody could send otherwise)")
	}
	names := map[string]bool{}
	keys := map[[32]byte]string{}
	for i, p := range c.Producers {
		key := fmt.Sprintf("producers[%d]", i)
		if p.Name != "" {
			key = fmt.Sprintf("producers[%d] (%s)", i, p.Name)
		}
		if p.Name == "" {
			bad(key+".name", "must not be empty")
		} else if names[p.Name] {
			bad(key+".name", "duplicate producer name")
		}
		names[p.Name] = true
		switch {
		case p.Key == "" && p.KeySHA256 == "":
			bad(key+".key", "set key or key_sha256")
		case p.Key != "" && p.KeySHA256 != "":
			bad(key+".key", "set key or key_sha256, not both")
		case p.KeySHA256 != "" && !isSHA256Hex(p.KeySHA256):
			bad(key+".key_sha256", "must be 64 hex characters")
		case p.Key != "" && len(p.Key) < 16:
			bad(key+".key", "must be at least 16 characters")
		default:
			h := p.KeyHash()
			if other, dup := keys[h]; dup {
				bad(key+".key", "same key as producer %s", other)
			}
			keys[h] = p.Name
		}
		if len(p.Classes) == 0 {
			bad(key+".classes", "must list at least one class")
		}
		for j, cl := range p.Classes {
			if _, err := sms.ParseClass(cl); err != nil {
				bad(fmt.Sprintf("%s.classes[%d]", key, j), "%v", err)
			}
		}
		if p.Rate <= 0 {
			bad(key+".rate", "must be > 0 (messages per second)")
		}
		if p.Burst < 1 {
			bad(key+".burst", "must be >= 1")
		}
		if p.MaxOutstanding < 0 {
			bad(key+".max_outstanding", "must be >= 0 (0 means no limit)")
		}
	}
	if c.Admin.Enabled() {
		if _, dup := keys[c.Admin.KeyHash()]; dup {
			bad("admin.key", "must differ from every producer key")
		}
	}
}

func isSHA256Hex(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == sha256.Size
}

// ConfigError holds every problem found, one per key.
type ConfigError struct{ Problems []error }

func (e *ConfigError) Error() string {
	var sb strings.Builder
	sb.WriteString("invalid configuration:")
	for _, p := range e.Problems {
		sb.WriteString("\n  - ")
		sb.WriteString(p.Error())
	}
	return sb.String()
}

func (e *ConfigError) Unwrap() []error { return e.Problems }

func joinConfigErrors(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	slices.SortStableFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return &ConfigError{Problems: errs}
}

// nameKeysInYAMLError rewrites the decoder's "line N: ..." messages so that
// each names the key path it is about ("provider.timeout (line 2): ...").
// The decoder reports only lines, so on a line with several keys (flow
// style) the key is found by the value or field name the message quotes.
func nameKeysInYAMLError(data []byte, err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return msg
	}
	type entry struct{ path, key, value string }
	byLine := map[int][]entry{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				val := ""
				if v.Kind == yaml.ScalarNode {
					val = v.Value
				}
				byLine[k.Line] = append(byLine[k.Line], entry{p, k.Value, val})
				walk(v, p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		}
	}
	walk(&root, "")
	pick := func(line int, text string) (string, bool) {
		es := byLine[line]
		for _, e := range es {
			if e.value != "" && strings.Contains(text, "`"+e.value+"`") {
				return e.path, true
			}
			if strings.Contains(text, "field "+e.key+" ") {
				return e.path, true
			}
		}
		if len(es) > 0 {
			return es[len(es)-1].path, true
		}
		return "", false
	}
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		trim := strings.TrimSpace(l)
		var n int
		if _, err := fmt.Sscanf(trim, "line %d:", &n); err != nil {
			continue
		}
		if p, ok := pick(n, trim); ok {
			rest := strings.TrimPrefix(trim, fmt.Sprintf("line %d:", n))
			lines[i] = strings.Replace(l, trim, fmt.Sprintf("%s (line %d):%s", p, n, rest), 1)
		}
	}
	return strings.Join(lines, "\n")
}
