package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"smsgw/internal/provider/httpprov"
	"smsgw/internal/sms"
)

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
	if c.Account == "" {
		bad("account", "must not be empty")
	} else if strings.ContainsAny(c.Account, "{}: \t\n") {
		bad("account", "%q may not contain braces, colons or spaces (it becomes a Redis hash tag)", c.Account)
	}

	errs = append(errs, leaves(c.validateProvider(bad)...)...)
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
	if m.OTPDeadline <= 0 || m.OTPDeadline > MaxOTPDeadline {
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
	return joinErrors(errs)
}

// validateProvider leaves each adapter's own keys to its Settings.Validate,
// the rule its constructor applies too.
func (c *Config) validateProvider(bad func(key, format string, a ...any)) []error {
	p := c.Provider
	var errs []error
	switch p.Kind {
	case "http":
		errs = append(errs, p.HTTP.Validate("provider"))
	case "twilio":
		errs = append(errs, p.Twilio.Validate("provider.twilio"))
	case "vonage":
		errs = append(errs, p.Vonage.Validate("provider.vonage"))
	case "":
		bad("provider.kind", "must be set (http, twilio or vonage); smsgw refuses to start without a provider")
	default:
		bad("provider.kind", "%q is not one of http, twilio, vonage", p.Kind)
	}
	if p.Kind != "http" && p.HTTP.URL != "" {
		// The API base URL override of twilio and vonage.
		errs = append(errs, httpprov.CheckURL("provider.url", p.HTTP.URL))
	}
	if p.Timeout <= 0 {
		bad("provider.timeout", "must be > 0")
	}
	if p.ContractRPS <= 0 {
		bad("provider.contract_rps", "must be > 0")
	}
	return errs
}

// leaves flattens errors joined with errors.Join (an adapter's settings
// errors, one per key) and drops nils.
func leaves(errs ...error) []error {
	var out []error
	for _, err := range errs {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			out = append(out, leaves(j.Unwrap()...)...)
		} else if err != nil {
			out = append(out, err)
		}
	}
	return out
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

// Error holds every problem found, one per key.
type Error struct{ Problems []error }

func (e *Error) Error() string {
	var sb strings.Builder
	sb.WriteString("invalid configuration:")
	for _, p := range e.Problems {
		sb.WriteString("\n  - ")
		sb.WriteString(p.Error())
	}
	return sb.String()
}

func (e *Error) Unwrap() []error { return e.Problems }

func joinErrors(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	slices.SortStableFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return &Error{Problems: errs}
}
