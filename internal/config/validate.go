package config

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"smsgw/internal/keyspace"
	"smsgw/internal/limiter"
	"smsgw/internal/provider/httpprov"
	"smsgw/internal/sms"
)

// otpReplyHeadroom is what an OTP request may spend besides its deadline:
// the idempotency lock and the ingress quota before it (one Redis call
// each, bounded by redis.timeout) and, after it, the shared pause and the
// suspension-guard count of a throttled send (2 s together) and storing the
// answer for replays (2 s).
const otpReplyHeadroom = 5 * time.Second

// Validate checks every key and reports all problems at once, each naming
// its key, as an *Error. It holds every rule a component would otherwise
// only apply at start-up, so that `smsgw check-config` refuses exactly
// what `smsgw serve` refuses.
func (c *Config) Validate() error {
	var p problems
	c.validateBackend(&p)
	c.validateProvider(&p)
	c.validateLimits(&p)
	c.validateProducers(&p)
	c.validateAdmin(&p)
	c.validateDispatch(&p)
	c.validateMessages(&p)
	c.validateEdge(&p)
	c.validateWebhooks(&p)
	c.validateProtection(&p)
	return joinErrors(p)
}

// problems collects one error per bad key.
type problems []error

func (p *problems) add(key, format string, a ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...)))
}

// addErr adds every error err holds: an adapter's Settings.Validate joins
// one *httpprov.SettingError per key.
func (p *problems) addErr(err error) {
	if err == nil {
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			p.addErr(e)
		}
		return
	}
	*p = append(*p, err)
}

// validateBackend: listen, redis, store and account.
func (c *Config) validateBackend(p *problems) {
	if c.Listen == "" {
		p.add("listen", "must not be empty (for example \":8080\")")
	} else if _, port, err := net.SplitHostPort(c.Listen); err != nil {
		p.add("listen", "%q is not host:port: %v", c.Listen, err)
	} else if _, err := lookupPort(port); err != nil {
		p.add("listen", "%q: %v", c.Listen, err)
	}

	if c.Redis.Enabled() {
		for _, a := range c.Redis.Addrs() {
			if _, port, err := net.SplitHostPort(a); err != nil {
				p.add("redis.addr", "%q is not host:port", a)
			} else if n, err := lookupPort(port); err != nil || n == 0 {
				p.add("redis.addr", "%q has no valid port", a)
			}
		}
	} else if c.Redis.MasterName != "" {
		p.add("redis.master_name", "needs redis.addr (the Sentinel addresses)")
	}
	if c.Redis.DB < 0 {
		p.add("redis.db", "must be >= 0")
	}
	if _, err := c.Redis.TLSConfig(); err != nil {
		p.addErr(err)
	}
	if (c.Redis.SentinelUsername != "" || c.Redis.SentinelPassword != "") && c.Redis.MasterName == "" {
		key := "redis.sentinel_password"
		if c.Redis.SentinelUsername != "" {
			key = "redis.sentinel_username"
		}
		p.add(key, "is for Sentinel; set redis.master_name too")
	}
	if c.Redis.DB != 0 && len(c.Redis.Addrs()) > 1 && c.Redis.MasterName == "" {
		p.add("redis.db", "Redis Cluster has only database 0")
	}
	if c.Redis.Timeout <= 0 {
		p.add("redis.timeout", "must be > 0")
	}
	switch {
	case c.Redis.WaitReplicas < 0 || c.Redis.WaitReplicas > MaxWaitReplicas:
		p.add("redis.wait_replicas", "must be between 0 and %d", MaxWaitReplicas)
	case c.Redis.WaitReplicas > 0 && !c.Redis.Enabled():
		p.add("redis.wait_replicas", "needs redis.addr (the embedded store has no replicas)")
	case c.Redis.WaitReplicas > 0 && (c.Redis.WaitTimeout <= 0 || c.Redis.WaitTimeout >= c.Redis.Timeout):
		p.add("redis.wait_timeout", "must be > 0 and below redis.timeout (%s) when redis.wait_replicas is set", c.Redis.Timeout)
	}
	if !c.Redis.Enabled() && c.Store.Path == "" {
		p.add("store.path", "must be set when redis.addr is empty (the embedded store needs a directory)")
	}
	// The one account rule: it becomes the hash tag of every shared key.
	if err := keyspace.ValidateAccount(c.Account); err != nil {
		p.add("account", "%v", err)
	}
}

// validateProvider leaves each adapter's own keys to its Settings.Validate,
// the rule its constructor applies too.
func (c *Config) validateProvider(p *problems) {
	pc := c.Provider
	switch pc.Kind {
	case "http":
		p.addErr(pc.HTTP.Validate("provider"))
	case "twilio":
		p.addErr(pc.Twilio.Validate("provider.twilio"))
		p.addErr(pc.Twilio.CheckWebhooks("provider.twilio", "provider.receipt_url", pc.ReceiptURL, pc.InboundURL))
	case "vonage":
		p.addErr(pc.Vonage.Validate("provider.vonage"))
	case "":
		p.add("provider.kind", "must be set (http, twilio or vonage); smsgw refuses to start without a provider")
	default:
		p.add("provider.kind", "%q is not one of http, twilio, vonage", pc.Kind)
	}
	if pc.Kind != "http" && pc.HTTP.URL != "" {
		// The API base URL override of twilio and vonage.
		p.addErr(httpprov.CheckURL("provider.url", pc.HTTP.URL))
	}
	if pc.ReceiptURL != "" {
		if pc.Kind != "twilio" { // twilio: CheckWebhooks, above, checks it as its StatusCallback
			p.addErr(httpprov.CheckURL("provider.receipt_url", pc.ReceiptURL))
		}
		checkWebhookTLS(p, "provider.receipt_url", pc.ReceiptURL)
	}
	validatePreviousReceiptSecret(p, pc)
	checkSecret(p, "provider.receipt_secret", pc.ReceiptSecret)
	checkSecret(p, "provider.previous_receipt_secret", pc.PreviousReceiptSecret)
	switch pc.Kind {
	case "twilio":
		checkSecret(p, "provider.twilio.auth_token", pc.Twilio.AuthToken)
		checkSecret(p, "provider.twilio.webhook_auth_token", pc.Twilio.WebhookAuthToken)
	case "vonage":
		checkSecret(p, "provider.vonage.signature_secret", pc.Vonage.SignatureSecret)
	}
	if pc.InboundURL != "" {
		p.addErr(httpprov.CheckURL("provider.inbound_url", pc.InboundURL))
		checkWebhookTLS(p, "provider.inbound_url", pc.InboundURL)
	}
	if pc.Timeout < 0 {
		p.add("provider.timeout", "must be >= 0 (0: the adapter's default)")
	}
	if !positive(pc.ContractRPS) {
		p.add("provider.contract_rps", "must be a number > 0")
	}
}

func (c *Config) validateLimits(p *problems) {
	l := c.Limits
	contract := c.Provider.ContractRPS
	targetOK := false
	switch {
	case !positive(l.TargetRPS):
		p.add("limits.target_rps", "must be a number > 0")
	case positive(contract) && l.TargetRPS > contract:
		p.add("limits.target_rps", "%g exceeds provider.contract_rps %g", l.TargetRPS, contract)
	default:
		targetOK = true
	}
	if l.Burst < 1 {
		p.add("limits.burst", "must be >= 1")
	} else if targetOK && positive(contract) && l.TargetRPS+float64(l.Burst) > contract {
		// GCRA bounds any interval t by rate·t + burst; over one second
		// that must stay within the contract however the provider measures.
		p.add("limits.burst", "target_rps %g + burst %d exceeds provider.contract_rps %g in a one-second window",
			l.TargetRPS, l.Burst, contract)
	}
	rates := []limiter.Rate{{PerSecond: l.TargetRPS, Burst: l.Burst}}
	ratesOK := targetOK && l.Burst >= 1 && checkRate(p, "limits.target_rps", "the rate", rates[0])
	for _, name := range slices.Sorted(maps.Keys(l.Classes)) {
		r, ok := c.validateClass(p, name, l.Classes[name])
		rates, ratesOK = append(rates, r), ratesOK && ok
	}
	labels := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(l.Senders)) {
		r, ok := c.validateSender(p, name, l.Senders[name])
		rates, ratesOK = append(rates, r), ratesOK && ok
		if label := sms.SenderLabel(name); labels[label] {
			p.add("limits.senders."+label, "two senders show as %s (their numbers masked) in metrics and the stats answer: configure one of them only, or senders whose masked forms differ", label)
		} else {
			labels[label] = true
		}
	}
	if l.MaxSenders < 1 {
		p.add("limits.max_senders", "must be >= 1")
		return
	}
	// Each rate divided among max_senders processes must still be one the
	// limiter takes; one problem is enough to name the key.
	for _, r := range rates {
		if ratesOK && !checkRate(p, "limits.max_senders", "the Redis-down fallback (a rate / max_senders) of", fallbackRate(r, l.MaxSenders)) {
			return
		}
	}
}

// validateClass checks one class cap and returns its limiter rate, and
// whether the rate is valid.
func (c *Config) validateClass(p *problems, name string, cl ClassLimits) (limiter.Rate, bool) {
	l := c.Limits
	key := "limits.classes." + name
	cls, err := sms.ParseClass(name)
	if err != nil {
		p.add(key, "unknown class (want otp, transactional or marketing)")
		return limiter.Rate{}, false
	}
	if cls == sms.ClassOTP {
		p.add(key, "otp cannot be capped: it must always have the headroom the cap leaves")
	}
	if cl.Burst < 0 {
		p.add(key+".burst", "must be >= 0 (0 means limits.burst)")
	}
	validateQuietHours(p, key+".quiet_hours", cls, cl.QuietHours)
	r := limiter.Rate{PerSecond: cl.MaxRPS, Burst: cl.Burst}
	if r.Burst == 0 {
		r.Burst = l.Burst
	}
	switch {
	case !positive(cl.MaxRPS):
		p.add(key+".max_rps", "must be a number > 0")
	case positive(l.TargetRPS) && cl.MaxRPS >= l.TargetRPS:
		p.add(key+".max_rps", "%g must be below limits.target_rps %g so OTP keeps headroom", cl.MaxRPS, l.TargetRPS)
	case r.Burst >= 1:
		return r, checkRate(p, key+".max_rps", "the cap", r)
	}
	return r, false
}

// validateSender checks one sender's limit and returns its limiter rate,
// and whether the rate is valid. The key shows a sender that looks like a
// phone number masked.
func (c *Config) validateSender(p *problems, name string, sl SenderLimits) (limiter.Rate, bool) {
	l := c.Limits
	key := "limits.senders." + sms.SenderLabel(name)
	if name == "" {
		p.add("limits.senders", "a sender with an empty name")
	}
	r := limiter.Rate{PerSecond: sl.MaxRPS, Burst: SenderBurst(sl)}
	switch {
	case sl.Burst < 0:
		p.add(key+".burst", "must be >= 0 (0 means 1)")
	case l.Burst >= 1 && sl.Burst > l.Burst:
		p.add(key+".burst", "%d exceeds limits.burst %d: the account's limit comes first", sl.Burst, l.Burst)
	}
	switch {
	case !positive(sl.MaxRPS):
		p.add(key+".max_rps", "must be a number > 0")
	case positive(l.TargetRPS) && sl.MaxRPS > l.TargetRPS:
		p.add(key+".max_rps", "%g exceeds limits.target_rps %g: a sender's limit lies under the account's", sl.MaxRPS, l.TargetRPS)
	case sl.Burst >= 0:
		return r, checkRate(p, key+".max_rps", "the sender limit", r)
	}
	return r, false
}

// SenderBurst is the burst of a sender's limit: limits.senders.<sender>.burst,
// 1 when unset.
func SenderBurst(sl SenderLimits) int { return max(sl.Burst, 1) }

// validateQuietHours: only marketing waits for the recipient's day; OTP
// and transactional messages are exempt by the contract.
func validateQuietHours(p *problems, key string, cls sms.Class, q QuietHoursConfig) {
	if !q.Set() {
		return
	}
	if cls != sms.ClassMarketing {
		p.add(key, "only marketing may have quiet hours (otp and transactional are never held)")
		return
	}
	if _, err := sms.ParseClock(q.From); err != nil {
		p.add(key+".from", "%v", err)
	}
	if _, err := sms.ParseClock(q.To); err != nil {
		p.add(key+".to", "%v", err)
	}
	if q.From == q.To {
		p.add(key, "from and to are equal: the window would be empty or the whole day")
	}
}

// positive reports whether x is a finite number > 0 (NaN is not).
func positive(x float64) bool { return x > 0 && !math.IsInf(x, 1) }

// checkRate applies the limiter's own rule for one GCRA key (the finest
// interval, the longest horizon) to r, what the key leads to, and reports
// a refusal under key.
func checkRate(p *problems, key, what string, r limiter.Rate) bool {
	if _, err := limiter.NewLocal(limiter.Config{Global: r}); err != nil {
		p.add(key, "the limiter refuses %s %g/s with burst %d: %v", what, r.PerSecond, r.Burst, err)
		return false
	}
	return true
}

// fallbackRate is r as limiter.NewShared divides it for each of n
// processes deciding alone while Redis is down.
func fallbackRate(r limiter.Rate, n int) limiter.Rate {
	return limiter.Rate{PerSecond: r.PerSecond / float64(n), Burst: max(1, r.Burst/n)}
}

func (c *Config) validateProducers(p *problems) {
	if len(c.Producers) == 0 {
		p.add("producers", "must list at least one producer (nobody could send otherwise)")
	}
	names := map[string]bool{}
	// keys maps every key the gateway takes, current and previous, to
	// whose it is: one key must name one principal.
	keys := keyOwners{}
	current := make([]*[32]byte, len(c.Producers)) // each producer's usable key
	for i, pr := range c.Producers {
		key := producerKey(i, pr)
		if pr.Name == "" {
			p.add(key+".name", "must not be empty")
		} else if names[pr.Name] {
			p.add(key+".name", "duplicate producer name")
		}
		names[pr.Name] = true
		if h, ok := validateProducerKey(p, key, pr); ok {
			if other, dup := keys[h]; dup {
				p.add(key+".key", "same key as %s", other)
			}
			keys[h] = "producer " + pr.Name
			current[i] = &h
		}
		if len(pr.Classes) == 0 {
			p.add(key+".classes", "must list at least one class")
		}
		for j, cl := range pr.Classes {
			if _, err := sms.ParseClass(cl); err != nil {
				p.add(fmt.Sprintf("%s.classes[%d]", key, j), "%v", err)
			}
		}
		if !positive(pr.Rate) {
			p.add(key+".rate", "must be a number > 0 (messages per second)")
		}
		if pr.Burst < 1 {
			p.add(key+".burst", "must be >= 1")
		}
		if positive(pr.Rate) && pr.Burst >= 1 {
			// The ingress quota is a limiter key, checked on every request.
			checkRate(p, key+".rate", "the ingress quota", limiter.Rate{PerSecond: pr.Rate, Burst: pr.Burst})
		}
		if pr.MaxOutstanding < 0 {
			p.add(key+".max_outstanding", "must be >= 0 (0 means no limit)")
		}
		if pr.MaxKeyedPerDay < 0 || pr.MaxKeyedPerDay > MaxMaxKeyedPerDay {
			p.add(key+".max_keyed_per_day", "must be 0 (the default, %d) to %d", DefaultMaxKeyedPerDay, MaxMaxKeyedPerDay)
		} else {
			checkRate(p, key+".max_keyed_per_day", "the keyed-request quota", pr.KeyedRate())
		}
		validateWebhook(p, key+".webhook", pr.Webhook)
		validateBudget(p, key+".budget", pr.Budget)
		validateSenderPools(p, key, pr)
		validateSenderList(p, key+".senders", pr.Senders, nil)
	}
	if c.Admin.Enabled() {
		if _, dup := keys[c.Admin.KeyHash()]; dup {
			p.add("admin.key", "must differ from every producer key")
		}
		if c.adminKeyUsable() {
			keys[c.Admin.KeyHash()] = "admin.key"
		}
	}
	c.validatePreviousKeys(p, keys, current)
}

// producerKey is the key path of producers[i], with its name when it has
// one: "producers[1] (login)".
func producerKey(i int, pr Producer) string {
	if pr.Name != "" {
		return fmt.Sprintf("producers[%d] (%s)", i, pr.Name)
	}
	return fmt.Sprintf("producers[%d]", i)
}

// validateProducerKey checks a producer's key and returns its hash when it
// is usable.
func validateProducerKey(p *problems, key string, pr Producer) ([32]byte, bool) {
	switch {
	case pr.Key == "" && pr.KeySHA256 == "":
		p.add(key+".key", "set key or key_sha256")
	case pr.Key != "" && pr.KeySHA256 != "":
		p.add(key+".key", "set key or key_sha256, not both")
	case pr.KeySHA256 != "" && !isSHA256Hex(pr.KeySHA256):
		p.add(key+".key_sha256", "must be 64 hex characters")
	case pr.Key != "" && secretWeakness(pr.Key) != "":
		checkSecret(p, key+".key", pr.Key)
	default:
		return pr.KeyHash(), true
	}
	return [32]byte{}, false
}

func (c *Config) validateAdmin(p *problems) {
	if l := c.Admin.Listen; l != "" {
		if _, port, err := net.SplitHostPort(l); err != nil {
			p.add("admin.listen", "%q is not host:port: %v", l, err)
		} else if _, err := lookupPort(port); err != nil {
			p.add("admin.listen", "%q: %v", l, err)
		} else if l == c.Listen && port != "0" {
			p.add("admin.listen", "%q must differ from listen", l)
		}
	}
	if c.Admin.Key != "" && c.Admin.KeySHA256 != "" {
		p.add("admin", "set key or key_sha256, not both")
	}
	if c.Admin.KeySHA256 != "" && !isSHA256Hex(c.Admin.KeySHA256) {
		p.add("admin.key_sha256", "must be 64 hex characters")
	}
	checkSecret(p, "admin.key", c.Admin.Key)
}

// adminKeyUsable reports whether the admin key is set and passes
// validateAdmin's rules.
func (c *Config) adminKeyUsable() bool {
	a := c.Admin
	switch {
	case a.Key != "" && a.KeySHA256 != "":
		return false
	case a.Key != "":
		return secretWeakness(a.Key) == ""
	default:
		return isSHA256Hex(a.KeySHA256)
	}
}

func isSHA256Hex(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == sha256.Size
}

func (c *Config) validateDispatch(p *problems) {
	d := c.Dispatch
	if d.Workers < 1 {
		p.add("dispatch.workers", "must be >= 1")
	}
	if d.OTPWorkers < 0 {
		p.add("dispatch.otp_workers", "must be >= 0")
	}
	if d.Lease < time.Second {
		p.add("dispatch.lease", "must be at least 1s (got %s)", d.Lease)
	}
	if d.MaxAttempts < 1 {
		p.add("dispatch.max_attempts", "must be >= 1")
	}
	if d.PoisonAfter < 1 || d.PoisonAfter > 100 {
		p.add("dispatch.poison_after", "must be 1 to 100 (got %d)", d.PoisonAfter)
	}
	if d.BackoffBase <= 0 {
		p.add("dispatch.backoff_base", "must be > 0")
	}
	if d.BackoffMax < d.BackoffBase {
		p.add("dispatch.backoff_max", "must be >= dispatch.backoff_base")
	}
	if d.ShutdownTimeout <= 0 {
		p.add("dispatch.shutdown_timeout", "must be > 0")
	}
	g := d.SuspensionGuard
	if g.Threshold < 1 {
		p.add("dispatch.suspension_guard.threshold", "must be >= 1")
	}
	// The guard counts on a millisecond clock.
	if g.Window < time.Millisecond {
		p.add("dispatch.suspension_guard.window", "must be at least 1ms (got %s)", g.Window)
	}
	if !(g.Share > 0 && g.Share < 1) {
		p.add("dispatch.suspension_guard.share", "must be between 0 and 1 (exclusive), got %g", g.Share)
	}
}

func (c *Config) validateMessages(p *problems) {
	m := c.Messages
	if m.MaxSegments < 1 || m.MaxSegments > 255 {
		p.add("messages.max_segments", "must be between 1 and 255")
	}
	if m.DefaultTTL < 0 {
		p.add("messages.default_ttl", "must be >= 0")
	}
	if m.MaxTTL <= 0 {
		p.add("messages.max_ttl", "must be > 0")
	} else if m.DefaultTTL > m.MaxTTL {
		p.add("messages.default_ttl", "must be <= messages.max_ttl (%s)", m.MaxTTL)
	}
	// An idempotency entry lives with its message: a shorter retention
	// would end the replay of a first answer before the window does.
	if m.Retention < IdempotencyWindow {
		p.add("messages.retention", "%s is shorter than the idempotency window (%s)", m.Retention, IdempotencyWindow)
	}
	if m.OTPDeadline <= 0 || m.OTPDeadline > MaxOTPDeadline {
		p.add("messages.otp_deadline", "must be in (0, %s]", MaxOTPDeadline)
	}
}

// validateEdge: log and http.
func (c *Config) validateEdge(p *problems) {
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		p.add("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		p.add("log.format", "%q is not one of json, text", c.Log.Format)
	}

	h := c.HTTP
	if h.MaxBodyBytes < 1024 {
		p.add("http.max_body_bytes", "must be at least 1024")
	}
	if h.ReadTimeout <= 0 {
		p.add("http.read_timeout", "must be > 0")
	}
	// The server cuts a reply off at write_timeout. An OTP that is sent
	// after that leaves the client with no answer; it retries and the code
	// goes out twice.
	longest := max(c.Messages.OTPDeadline, MaxOTPDeadline)
	if need := longest + otpReplyHeadroom; h.WriteTimeout <= need {
		p.add("http.write_timeout", "%s must be longer than %s, the longest OTP deadline (%s) plus %s for the calls around the send: "+
			"a client cut off before its answer retries an OTP that may have been sent", h.WriteTimeout, need, longest, otpReplyHeadroom)
	}
	if h.IdleTimeout <= 0 {
		p.add("http.idle_timeout", "must be > 0")
	}
	if h.MaxConnections < 16 {
		p.add("http.max_connections", "%d must be at least 16", h.MaxConnections)
	}
	// A body of max_body_bytes must fit under both bounds, or it is
	// refused for ever.
	if h.BodyBytesInFlightPerProducer < h.MaxBodyBytes {
		p.add("http.body_bytes_in_flight_per_producer", "%d must be at least http.max_body_bytes (%d)", h.BodyBytesInFlightPerProducer, h.MaxBodyBytes)
	}
	if h.BodyBytesInFlight < h.BodyBytesInFlightPerProducer {
		p.add("http.body_bytes_in_flight", "%d must be at least http.body_bytes_in_flight_per_producer (%d)", h.BodyBytesInFlight, h.BodyBytesInFlightPerProducer)
	}
	for i, s := range h.TrustedProxies {
		// The parser the gateway uses, so that both accept the same CIDRs.
		if _, err := netip.ParsePrefix(s); err != nil {
			p.add(fmt.Sprintf("http.trusted_proxies[%d]", i), "%q is not a CIDR", s)
		}
	}
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

// lookupPort resolves a port number or service name. It reads at most the
// local services database, so there is no deadline to give it.
func lookupPort(port string) (int, error) {
	return net.DefaultResolver.LookupPort(context.Background(), "tcp", port)
}
