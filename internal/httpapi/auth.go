package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/limiter"
	"smsgw/internal/logsample"
	"smsgw/internal/sms"
)

// Producer is one configured producer, ready for admission decisions.
type Producer struct {
	Name           string
	hash           [32]byte
	classes        [admission.NumClasses]bool
	Ingress        limiter.Rate
	MaxOutstanding int64
	senders        []string // empty: any sender
	pooled         bool     // sender_pools: a request without from is given its sender at admission
	unicodeCtl     bool     // may send bidi and zero-width format characters
	// webhook is set when the producer has a default callback url;
	// callbackAllow are the webhook.allow prefixes a message's callback_url
	// may be under (callbackAllowed).
	webhook       bool
	callbackAllow []CallbackPrefix
	// previous is the producer's previous key while its key is rotated
	// (producers[].previous_key); nil: none.
	previous *PreviousKey
	// Keyed is the quota of requests with an Idempotency-Key
	// (producers[].max_keyed_per_day; admission.StepKeyed).
	Keyed limiter.Rate
	// Budget is producers[].budget (admission.StepBudget).
	Budget admission.Budget
}

// previousKeyLogEvery is the most often the use of one principal's
// previous key is logged: the line says how many uses it stands for.
const previousKeyLogEvery = time.Minute

// PreviousKey is a principal's previous key while its key is rotated
// (producers[].previous_key, admin.previous_key): a request bearing it is
// the principal's, like one bearing the current key, and is counted in
// smsgw_auth_previous_key_total and logged at most once a minute, so the
// operator sees when nobody uses it any more and it can be removed.
type PreviousKey struct {
	hash      [32]byte
	principal string             // the producer's name, or "admin"
	uses      prometheus.Counter // smsgw_auth_previous_key_total{principal}
	log       logsample.Sampler
}

// newPreviousKey is principal's previous key h, counted in uses under its
// name; the series exists (at 0) from start-up on.
func newPreviousKey(principal string, h [32]byte, uses *prometheus.CounterVec) *PreviousKey {
	return &PreviousKey{hash: h, principal: principal, uses: uses.WithLabelValues(principal)}
}

// CallbackPrefix is one webhook.allow entry, parsed: a callback_url is
// under it when its scheme and host are the same (in any ASCII case)
// and its path segments start with segs, with at least one more segment
// when the prefix's path ends with "/".
type CallbackPrefix struct {
	scheme, host string
	segs         []string // the prefix's path split at "/", without the empty last one of a trailing "/"
	dir          bool     // the path ends with "/": "/cb/" allows "/cb/" and "/cb/x", not "/cb"
}

// parseCallbackPrefix parses a webhook.allow entry; false for one the
// configuration would refuse (it then allows nothing).
func parseCallbackPrefix(a string) (CallbackPrefix, bool) {
	u, err := url.Parse(a)
	if err != nil || config.CheckCallbackURL(a) != nil || u.RawQuery != "" || u.ForceQuery {
		return CallbackPrefix{}, false
	}
	p := pathOf(u)
	dir := strings.HasSuffix(p, "/")
	return CallbackPrefix{scheme: u.Scheme, host: u.Host, segs: strings.Split(strings.TrimSuffix(p, "/"), "/"), dir: dir}, true
}

// ParseCallbackPrefixes parses a producer's webhook.allow, leaving out
// entries the configuration would refuse.
func ParseCallbackPrefixes(allow []string) []CallbackPrefix {
	var out []CallbackPrefix
	for _, a := range allow {
		if c, ok := parseCallbackPrefix(a); ok {
			out = append(out, c)
		}
	}
	return out
}

// asciiEqualFold is a == b with ASCII letters in any case; unlike
// strings.EqualFold, "\u212a" (Kelvin) is not "k" and "\u017f" (long s)
// not "s".
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// pathOf is u's decoded path, "/" for none ("https://h?x" asks for "/").
func pathOf(u *url.URL) string {
	if u.Path == "" {
		return "/"
	}
	return u.Path
}

// under reports whether u (a callback_url that passed
// config.CheckCallbackURL: no dot segment, encoded slash or backslash, so
// its decoded path splits into the segments a server sees) is under c.
func (c CallbackPrefix) under(u *url.URL) bool {
	if !asciiEqualFold(u.Scheme, c.scheme) || !asciiEqualFold(u.Host, c.host) {
		return false
	}
	segs := strings.Split(pathOf(u), "/")
	if len(segs) < len(c.segs) || c.dir && len(segs) == len(c.segs) {
		return false
	}
	return slices.Equal(segs[:len(c.segs)], c.segs)
}

// bodyControls is the 400 for a body with a bidirectional or zero-width
// character, unless p may send them.
func (p *Producer) bodyControls(body, prefix string) []fieldProblem {
	if p.unicodeCtl {
		return nil
	}
	var ve *sms.ValidationError
	if errors.As(sms.CheckFormatControls(body), &ve) {
		return []fieldProblem{{prefix + ve.Field, ve.Reason}}
	}
	return nil
}

// sender is the from a message of p goes out with: p's default (its first
// sender) when the request names none, or "" when p has sender pools
// (admission chooses); a 403 naming field when p may not use it.
func (p *Producer) sender(from, field string) (string, error) {
	if n, err := sms.NormalizeSender(from); err == nil {
		from = n // one E.164 sender however written; a bad one is the validation's to report
	}
	if len(p.senders) == 0 {
		return from, nil
	}
	if from == "" && p.pooled {
		return "", nil // admission gives it its class's sender (admission/pools.go)
	}
	if from == "" {
		return p.senders[0], nil
	}
	if slices.Contains(p.senders, from) {
		return from, nil
	}
	return "", &apiError{Kind: kindForbidden, Detail: fmt.Sprintf("%s: producer %s may not send as this sender", field, p.Name),
		Fields: []fieldProblem{{field, "is not one of the producer's senders"}}}

}

// normalizedSenders is a producer's senders as requests are compared
// with them (sms.NormalizeSender; config validated each).
func normalizedSenders(ss []string) []string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		if n, err := sms.NormalizeSender(s); err == nil {
			s = n
		}
		out = append(out, s)
	}
	return out
}

// callbackAllowed reports whether a message of this producer may send its
// events to raw: a URL under one of its webhook.allow prefixes by scheme,
// host and path segments (not by string: "/cb/../admin" is not under
// "/cb/", nor "/cbx"); its query is free.
func (p *Producer) callbackAllowed(raw string) bool {
	return CallbackUnder(p.callbackAllow, raw)
}

// CallbackUnder reports whether raw is a callback_url the API accepts
// under one of prefixes; the deliverer asks again before each attempt.
func CallbackUnder(prefixes []CallbackPrefix, raw string) bool {
	if config.CheckCallbackURL(raw) != nil {
		return false // the request's validation answered 400 already; never allowed
	}
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	for _, a := range prefixes {
		if a.under(u) {
			return true
		}
	}
	return false
}

func (p *Producer) allowed(c sms.Class) bool { return c.Valid() && p.classes[c] }

// Authenticator knows every producer key and the admin key, and the
// previous keys of those being rotated, as SHA-256 digests only.
type Authenticator struct {
	producers     []*Producer
	admin         [32]byte
	adminOn       bool
	adminPrevious *PreviousKey // nil: none
}

// NewAuthenticator holds the keys of cfg; the uses of previous keys are
// counted in previousUses (smsgw_auth_previous_key_total), whose series
// are those of the principals with a previous key: configured names only.
func NewAuthenticator(cfg config.Config, previousUses *prometheus.CounterVec) *Authenticator {
	a := &Authenticator{admin: cfg.Admin.KeyHash(), adminOn: cfg.Admin.Enabled()}
	if a.adminOn && cfg.Admin.Rotating() {
		a.adminPrevious = newPreviousKey(config.AdminPrincipal, cfg.Admin.PreviousKeyHash(), previousUses)
	}
	for _, p := range cfg.Producers {
		pr := &Producer{
			Name:           p.Name,
			hash:           p.KeyHash(),
			Ingress:        limiter.Rate{PerSecond: p.Rate, Burst: p.Burst},
			MaxOutstanding: p.MaxOutstanding,
			Keyed:          p.KeyedRate(),
			Budget:         admission.Budget{Daily: p.Budget.DailyUnits, Monthly: p.Budget.MonthlyUnits, Loc: p.Budget.Location()},
			senders:        normalizedSenders(p.Senders),
			pooled:         len(p.SenderPools) > 0,
			unicodeCtl:     p.AllowUnicodeControls,
			webhook:        p.Webhook.URL != "",
			callbackAllow:  ParseCallbackPrefixes(p.Webhook.Allow),
		}
		for _, c := range p.Classes {
			if cl, err := sms.ParseClass(c); err == nil {
				pr.classes[cl] = true
			}
		}
		if p.Rotating() {
			pr.previous = newPreviousKey(p.Name, p.PreviousKeyHash(), previousUses)
		}
		a.producers = append(a.producers, pr)
	}
	return a
}

// bearer returns the SHA-256 of the request's bearer key, or false; false
// too for a request with more than one Authorization field, which a proxy
// in front may read otherwise than we would (one key authenticated there,
// another acted on here).
func bearer(r *http.Request) ([32]byte, bool) {
	vals := r.Header.Values("Authorization")
	if len(vals) != 1 {
		return [32]byte{}, false
	}
	h := vals[0]
	scheme, key, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return [32]byte{}, false
	}
	key = strings.TrimSpace(key)
	if key == "" {
		return [32]byte{}, false
	}
	return sha256.Sum256([]byte(key)), true
}

// ProducerFor compares the digest with every producer's key and previous
// key in constant time and without stopping early, so timing reveals
// neither the key nor its index; it returns the producer, and the
// previous key when the digest is that (else nil). The configuration
// makes every key name one producer.
func (a *Authenticator) ProducerFor(h [32]byte) (*Producer, *PreviousKey) {
	var (
		found *Producer
		prev  *PreviousKey
	)
	for _, p := range a.producers {
		if subtle.ConstantTimeCompare(h[:], p.hash[:]) == 1 {
			found = p
		}
		if p.previous != nil && subtle.ConstantTimeCompare(h[:], p.previous.hash[:]) == 1 {
			found, prev = p, p.previous
		}
	}
	return found, prev
}

// isAdmin reports whether the digest is the admin key's or its previous
// key's, comparing with both in constant time; the previous key when it
// is that (else nil).
func (a *Authenticator) isAdmin(h [32]byte) (bool, *PreviousKey) {
	if !a.adminOn {
		return false, nil
	}
	cur := subtle.ConstantTimeCompare(h[:], a.admin[:]) == 1
	if a.adminPrevious != nil && subtle.ConstantTimeCompare(h[:], a.adminPrevious.hash[:]) == 1 {
		return true, a.adminPrevious
	}
	return cur, nil
}

// previousKeyUsed counts one request authenticated with k, a previous key,
// and logs at most once a minute per principal that it is still in use
// (the principal's name and the uses the line stands for; never the key).
func (s *Server) previousKeyUsed(ctx context.Context, k *PreviousKey) {
	k.uses.Inc()
	if n, ok := k.log.Add(s.Now(), previousKeyLogEvery); ok {
		s.Log.InfoContext(ctx, "previous key still in use: switch the client to the new key, then remove previous_key",
			"principal", k.principal, "uses", n)
	}
}

type producerKey struct{}

// ProducerName is the name of the producer that authenticated r.
func (s *Server) ProducerName(r *http.Request) string { return producerFrom(r.Context()).Name }

func producerFrom(ctx context.Context) *Producer {
	p, _ := ctx.Value(producerKey{}).(*Producer)
	return p
}

func (s *Server) authProducer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, ok := bearer(r)
		if !ok {
			s.WriteError(w, r, errorf(kindUnauthorized, "send Authorization: Bearer <key>"))
			return
		}
		p, prev := s.Edge.Auth.ProducerFor(h)
		if p == nil {
			s.authFailed(w, r, "unknown producer key")
			return
		}
		if prev != nil {
			s.previousKeyUsed(r.Context(), prev)
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), producerKey{}, p)))
	})
}

func (s *Server) authAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, ok := bearer(r)
		if !ok {
			s.WriteError(w, r, errorf(kindUnauthorized, "send Authorization: Bearer <admin key>"))
			return
		}
		ok, prev := s.Edge.Auth.isAdmin(h)
		if !ok {
			if p, _ := s.Edge.Auth.ProducerFor(h); p != nil {
				s.WriteError(w, r, errorf(kindForbidden, "this endpoint needs the admin key"))
				return
			}
			s.authFailed(w, r, "unknown admin key")
			return
		}
		if prev != nil {
			s.previousKeyUsed(r.Context(), prev)
		}
		next.ServeHTTP(w, r)
	})
}

// authFailed answers a request whose bearer key is unknown: 401, or 429
// once its client address has failed too often (auththrottle); the WARN
// line is sampled.
func (s *Server) authFailed(w http.ResponseWriter, r *http.Request, what string) {
	s.failedAuth(w, r, what, "a valid key", errorf(kindUnauthorized, "unknown API key"))
}

// failedAuth answers a request that failed to authenticate (an unknown
// bearer key, a webhook's signature): answer, or 429 once its client
// address has failed too often (authThrottle), retrying with valid (what
// would pass); the WARN line what is sampled.
func (s *Server) failedAuth(w http.ResponseWriter, r *http.Request, what, valid string, answer error) {
	ip := clientIP(r.Context())
	if wait := s.Edge.AuthThrottle.Fail(ip); wait > 0 {
		s.WriteError(w, r, &apiError{Kind: kindAuthThrottled, RetryAfter: wait,
			Detail: "too many failed authentications from this address; retry after the Retry-After seconds with " + valid})
		return
	}
	if ok, left := s.Edge.AuthThrottle.SampleLog(); ok {
		s.Log.WarnContext(r.Context(), what, "path", logPath(r), "client_ip", ip, "not_logged_since_last", left)
	}
	s.WriteError(w, r, answer)
}

// asSender is what admission knows of p.
func (p *Producer) asSender() admission.Sender {
	return admission.Sender{Name: p.Name, MaxOutstanding: p.MaxOutstanding, Ingress: p.Ingress, Keyed: p.Keyed, Budget: p.Budget, Webhook: p.webhook}
}
