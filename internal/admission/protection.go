package admission

// Protection against SMS pumping and sending where nobody wants it
// (docs/design.md, "Protection"). Every message, whichever path it takes
// (POST /v1/otp, POST /v1/messages, each batch item), passes one check,
// protector.check, after its fields are validated and before any quota,
// queue or limiter is touched: a refused message never reaches the
// provider, never uses its rate and costs the producer no ingress quota.
//
// In order, for each number:
//  1. its region must be in protection.countries (when set);
//  2. its type must not be in protection.block_number_types;
//  3. it must not be on the suppression list (OTP only with
//     protection.suppress_otp);
//  4. an OTP must be within protection.otp_per_number for its number and
//     producer (this step records the OTP: it is the only step that writes).
//
// Numbers are never stored or logged: the stores see an HMAC-SHA256 of the
// number under the account's number key (kept with the suppression list),
// logs and answers the masked number.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/config"
	"smsgw/internal/limiter"
	"smsgw/internal/metricdef"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// refusal is why protection refused a message: the reason label of
// smsgw_protection_refusals_total and a key of the stats answer.
type refusal int

// The refusals, in the order of the checks.
const (
	refusedCountry refusal = iota
	refusedNumberType
	RefusedSuppressed
	refusedOTPPerNumber
	refusedRangeHeld
	NRefusals
)

var refusalNames = [NRefusals]string{"country", "number_type", "suppressed", "otp_per_number", "range_held"}

func (r refusal) String() string { return refusalNames[r] }

// Protector is the one protection check and what it keeps.
type Protector struct {
	cfg       config.ProtectionConfig
	countries map[string]bool // empty: every region
	blocked   map[sms.NumberType]bool
	numbers   state.NumberLimits
	Sup       state.Suppressions
	alarm     *prefixAlarm
	log       *slog.Logger

	refusals *prometheus.CounterVec
	counts   [NRefusals]atomic.Int64 // this process's refusals, for the stats totals

	keyMu sync.Mutex
	key   []byte // the account's number key, read once

	// While the shared stores fail, OTPs are checked in this process:
	// numbers hashed with localKey, counted in local.
	localKey  []byte
	local     *state.LocalNumberLimits
	fallbacks prometheus.Counter
	// Outage is this process's knowledge of Redis failures, shared with
	// the limiters (limiter.Outage): while a failure is recent OTPs skip
	// the shared stores, and a failure here makes the limiters skip Redis
	// for the OTP too. NewProtector gives it one of its own; replace it
	// before the first check.
	Outage   *limiter.Outage
	lastWarn atomic.Int64 // unix ns of the last fallback WARN
}

// NewProtector builds the protection check from its configuration and stores.
func NewProtector(cfg config.ProtectionConfig, numbers state.NumberLimits, sup state.Suppressions,
	reg prometheus.Registerer, log *slog.Logger, now func() time.Time) (*Protector, error) {
	p := &Protector{cfg: cfg, countries: map[string]bool{}, blocked: map[sms.NumberType]bool{},
		numbers: numbers, Sup: sup, log: log, localKey: make([]byte, 32), local: state.NewLocalNumberLimits(0),
		Outage: &limiter.Outage{}}
	_, _ = rand.Read(p.localKey)
	for _, c := range cfg.Countries {
		p.countries[c] = true
	}
	for _, t := range cfg.BlockNumberTypes {
		p.blocked[sms.NumberType(t)] = true
	}
	p.refusals = metricdef.CounterVec("smsgw_protection_refusals_total",
		"Messages refused by protection before any quota, queue or provider, by reason and class.", "reason", "class")
	p.fallbacks = metricdef.Counter("smsgw_protection_fallback_total",
		"OTP protection decisions taken in this process alone because the shared store failed.")
	if err := metricdef.Register(reg, p.refusals, p.fallbacks); err != nil {
		return nil, fmt.Errorf("gateway: protection metrics: %w", err)
	}
	for _, r := range refusalNames {
		for _, c := range sms.Classes {
			p.refusals.WithLabelValues(r, c.String())
		}
	}
	var err error
	if p.alarm, err = newPrefixAlarm(cfg.PrefixAlarm, cfg.Countries, reg, log, now); err != nil {
		return nil, err
	}
	return p, nil
}

// Target is one number to check and the request field that holds it.
type Target struct {
	To    string // E.164, validated
	Field string // "to", "messages[3].to"
	// Producer is the name of the producer that sends to To:
	// protection.otp_per_number counts each producer's OTPs apart.
	Producer string
	// ID is set by check: the number's id on the suppression list
	// (numberID under the account's key), which the message carries so
	// that a take checks the list again (sms.Message.NumberID). Empty
	// when the check refused the number first, or hashed it with this
	// process's own key (the shared store down, an OTP).
	ID string
}

// Check decides for every target of class cls. It returns one entry per
// target: nil when the message may go on, else the *Error to answer; and
// the OTPs it counted against their numbers (protection.otp_per_number),
// which the caller gives back (holds.giveBack) for each message refused
// later, so that only OTPs the gateway let through count. It sets the id
// of each target it hashed with the account's key. The error is a store
// failure (503): then nothing was decided and nothing is held.
func (p *Protector) Check(ctx context.Context, cls sms.Class, ts []Target) ([]*Rejection, Holds, error) {
	out := make([]*Rejection, len(ts))
	var held Holds
	var rest []int // indexes still allowed after the static checks
	for i, t := range ts {
		if e := p.checkDestination(cls, t); e != nil {
			out[i] = e
			continue
		}
		rest = append(rest, i)
	}
	if len(rest) == 0 {
		return out, nil, nil
	}
	ids := make([]string, len(rest))
	down := cls == sms.ClassOTP && p.sharedDown()
	kctx, cancel := otpStoreCall(ctx, cls)
	key, err := p.NumberKey(kctx, down)
	cancel()
	shared := err == nil && !down
	own := false // the ids are this process's, not the list's
	switch {
	case err != nil && cls != sms.ClassOTP:
		return nil, nil, unavailable("protection store", err)
	case !shared:
		// The OTP fast path keeps sending while the store is down (as it
		// does on the limiter's fallback): numbers are counted by this
		// process alone, hashed with the account's key when it was read
		// before, else with this process's.
		if key == nil {
			key, own = p.localKey, true
		}
		p.fellBack(ctx, cmp.Or(err, errSharedDown))
	}
	for k, i := range rest {
		ids[k] = NumberID(key, ts[i].To)
		if !own {
			ts[i].ID = ids[k]
		}
	}
	// Transactional and marketing are not looked up here: a message to a
	// suppressed number is accepted like any other and its take ends it
	// suppressed, never sent (queue.Suppression), so a producer cannot
	// probe the list by the answer. An OTP is sent at once (the fast
	// path): with suppress_otp it is refused here.
	if cls == sms.ClassOTP && p.cfg.SuppressOTP && shared {
		if err := p.checkSuppressed(ctx, cls, ts, rest, ids, out); err != nil {
			return nil, nil, err
		}
	}
	if cls != sms.ClassOTP {
		return out, nil, nil
	}
	held, err = p.checkOTPPerNumber(ctx, cls, ts, rest, ids, shared, out)
	if err != nil {
		held.GiveBack(ctx, p.log)
		return nil, nil, err
	}
	return out, held, nil
}

// hold is one OTP counted against its number: the store that counted it,
// the number's id and the entry's ticket; target is the index of its
// target in the check.
type hold struct {
	store  state.NumberLimits
	key    string
	ticket string
	Target int
}

// Holds are the OTPs one check counted.
type Holds []hold

// GiveBack returns every hold to its store, on a context of its own (the
// request's may have ended: the client went away). A failure leaves the
// otp counted, the safe side: it is logged, not answered.
func (hs Holds) GiveBack(ctx context.Context, log *slog.Logger) {
	if len(hs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
	defer cancel()
	for _, h := range hs {
		if err := h.store.Return(ctx, h.key, h.ticket); err != nil {
			log.DebugContext(ctx, "protection: an OTP refused later stays counted against its number", "err", err)
		}
	}
}

// Only returns the holds of the targets keep says to give back.
func (hs Holds) Only(keep func(target int) bool) Holds {
	var out Holds
	for _, h := range hs {
		if keep(h.Target) {
			out = append(out, h)
		}
	}
	return out
}

// giveBackTimeout bounds the return of one request's holds.
const giveBackTimeout = 2 * time.Second

// checkSuppressed refuses, in out, the targets rest whose number ids are
// on the suppression list. An OTP skips a failing list (the fast path
// keeps sending); other classes get the store's failure.
func (p *Protector) checkSuppressed(ctx context.Context, cls sms.Class, ts []Target, rest []int, ids []string, out []*Rejection) error {
	sctx, cancel := otpStoreCall(ctx, cls)
	listed, err := p.Sup.Contains(sctx, ids)
	cancel()
	switch {
	case err != nil && cls != sms.ClassOTP:
		return unavailable("suppression list", err)
	case err != nil:
		p.fellBack(ctx, err)
		listed = make([]bool, len(ids))
	}
	for k, i := range rest {
		if listed[k] {
			out[i] = p.Suppressed(cls, ts[i].Field, ids[k])
		}
	}
	return nil
}

// Suppressed refuses a message whose number (id) is on the suppression
// list, wherever the list was read (here, or in the queue's script).
func (p *Protector) Suppressed(cls sms.Class, field, id string) *Rejection {
	return p.refuse(RefusedSuppressed, cls, &Rejection{Kind: RejectSuppressed,
		Detail: field + ": the number is on the suppression list; nothing was sent",
		Fields: []rejectField{{field, "is on the suppression list"}},
		Extra:  map[string]any{"suppression_id": id}})
}

// CheckDeferred is check for one message of a class other than OTP whose
// suppression lookup the caller runs in its store (the one-round-trip
// accept): the static checks here, then the number id to look up.
func (p *Protector) CheckDeferred(ctx context.Context, cls sms.Class, t Target) (string, error) {
	if e := p.checkDestination(cls, t); e != nil {
		return "", e
	}
	key, err := p.NumberKey(ctx, false)
	if err != nil {
		return "", unavailable("protection store", err)
	}
	return NumberID(key, t.To), nil
}

// checkOTPPerNumber takes one OTP of each remaining target from its
// number's allowance (protection.otp_per_number), refusing in out those
// over it, and feeds the velocity alarm. A failing shared store falls
// back to this process's count for the rest of the request.
func (p *Protector) checkOTPPerNumber(ctx context.Context, cls sms.Class, ts []Target, rest []int, ids []string, shared bool,
	out []*Rejection) (Holds, error) {
	var held Holds
	for k, i := range rest {
		if out[i] != nil {
			continue
		}
		if wait := p.alarm.heldFor(ts[i].To); wait > 0 {
			out[i] = p.rangeHeld(cls, ts[i], wait)
			continue
		}
		if lim := p.cfg.OTPPerNumber; lim.Limit > 0 {
			store := state.NumberLimits(p.local)
			if shared {
				store = p.numbers
			}
			key := otpCapKey(ts[i].Producer, ids[k])
			tctx, cancel := otpStoreCall(ctx, cls)
			ticket, after, err := store.Take(tctx, key, lim.Limit, lim.Window)
			cancel()
			if err != nil && shared {
				p.fellBack(ctx, err)
				shared = false // the rest of a batch does not wait on the store again
				store = p.local
				ticket, after, err = store.Take(ctx, key, lim.Limit, lim.Window)
			}
			if err != nil {
				return held, unavailable("OTP per-number limit", err)
			}
			if ticket != "" {
				held = append(held, hold{store: store, key: key, ticket: ticket, Target: i})
			} else {
				out[i] = p.refuse(refusedOTPPerNumber, cls, &Rejection{Kind: RejectOTPPerNumber, RetryAfter: after,
					Detail: fmt.Sprintf("%s: at most %d OTPs per number every %s from one producer; nothing was sent", ts[i].Field, lim.Limit, lim.Window),
					Extra:  map[string]any{"limit": lim.Limit, "window_seconds": int64(lim.Window.Seconds())}})
				continue
			}
		}
		p.alarm.observe(ts[i].To)
	}
	return held, nil
}

// checkDestination is the static part: the number's region and type.
func (p *Protector) checkDestination(cls sms.Class, t Target) *Rejection {
	if len(p.countries) == 0 && len(p.blocked) == 0 {
		return nil
	}
	d := sms.DestinationOf(t.To)
	if len(p.countries) > 0 && !p.countries[d.Region] {
		region := d.Region
		if region == "" || region == sms.RegionNonGeo {
			region = "none"
		}
		return p.refuse(refusedCountry, cls, &Rejection{Kind: RejectDestination,
			Detail: fmt.Sprintf("%s: region %s is not an allowed destination (allowed: %s)", t.Field, region, strings.Join(p.cfg.Countries, ", ")),
			Fields: []rejectField{{t.Field, "region " + region + " is not an allowed destination"}},
			Extra:  map[string]any{"region": region}})
	}
	if p.blocked[d.Type] {
		return p.refuse(refusedNumberType, cls, &Rejection{Kind: RejectNumberType,
			Detail: fmt.Sprintf("%s: numbers of type %s are blocked", t.Field, d.Type),
			Fields: []rejectField{{t.Field, "is a " + string(d.Type) + " number, which is blocked"}},
			Extra:  map[string]any{"number_type": string(d.Type)}})
	}
	return nil
}

// errSharedDown stands for a shared store that failed less than a second
// ago (limiter.Outage): OTPs do not wait on it again meanwhile, as the
// limiter's breaker skips Redis: an OTP must not wait out a Redis timeout
// on every request.
var errSharedDown = errors.New("the shared store failed less than a second ago")

// otpStoreCall bounds one shared-store call of an OTP's check as the send
// limiter bounds its Redis calls (limiter.CallTimeout): a store that stops
// answering takes an eighth of the OTP's deadline (at least 250 ms), not
// all of it, and the OTP is then checked by this process alone and still
// has the time to be sent at the fallback rate. Other classes wait for the
// store as long as their request may.
func otpStoreCall(ctx context.Context, cls sms.Class) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if cls != sms.ClassOTP || !ok {
		return ctx, func() {}
	}
	d, _ := limiter.CallTimeout(ctx, time.Until(dl))
	return context.WithTimeout(ctx, d)
}

func (p *Protector) sharedDown() bool { return p.Outage.Recent() }

// fellBack counts one OTP decision taken locally, records a real failure
// in the process's Outage, and warns at most once every
// fallbackWarnEvery.
func (p *Protector) fellBack(ctx context.Context, err error) {
	p.fallbacks.Inc()
	now := time.Now().UnixNano()
	if !errors.Is(err, errSharedDown) {
		p.Outage.Failed()
	}
	last := p.lastWarn.Load()
	if now-last >= int64(fallbackWarnEvery) && p.lastWarn.CompareAndSwap(last, now) {
		p.log.WarnContext(ctx, "protection: shared store failing; OTPs are checked by this process alone "+
			"(per-number limit per replica, suppression list not read)", "err", err)
	}
}

const fallbackWarnEvery = 10 * time.Second

func (p *Protector) refuse(r refusal, cls sms.Class, e *Rejection) *Rejection {
	p.refusals.WithLabelValues(r.String(), cls.String()).Inc()
	p.counts[r].Add(1)
	return e
}

// Refused is this process's refusals by reason since it started.
func (p *Protector) Refused() [NRefusals]int64 {
	var out [NRefusals]int64
	for i := range out {
		out[i] = p.counts[i].Load()
	}
	return out
}

// unavailable refuses a message because a protection store it needs is
// down or slow (checked before anything is stored or sent).
func unavailable(what string, err error) *Rejection {
	return &Rejection{Kind: RejectUnavailable, RetryAfter: time.Second, Err: err,
		Detail: "the " + what + " is unavailable; nothing was sent or queued"}
}

// SuppressionsUnavailable answers an admin call on the suppression list
// while its store is down or slow: a change may still have been applied,
// and is safe to repeat.
func SuppressionsUnavailable(err error) *Rejection {
	return &Rejection{Kind: RejectUnavailable, RetryAfter: time.Second, Err: err,
		Detail: "the suppression list is unavailable; retry later (a change that may have been applied is safe to repeat)"}
}

// NumberKey is the account's number key, read from the store once; with
// cachedOnly it does not ask the store (errSharedDown when never read).
func (p *Protector) NumberKey(ctx context.Context, cachedOnly bool) ([]byte, error) {
	p.keyMu.Lock()
	defer p.keyMu.Unlock()
	if p.key != nil {
		return p.key, nil
	}
	if cachedOnly {
		return nil, errSharedDown
	}
	k, err := p.Sup.Key(ctx)
	if err != nil {
		return nil, err
	}
	p.key = k
	return k, nil
}

// NumberID is the stable, keyed hash that stands for a number in every
// store and answer: 32 hex digits of HMAC-SHA256(key, number).
func NumberID(key []byte, e164 string) string {
	h := numberHasherFor(key)
	m := h.pool.Get().(*numberMAC)
	m.mac.Reset()
	m.in = append(m.in[:0], e164...)
	m.mac.Write(m.in)
	id := hex.EncodeToString(m.mac.Sum(m.sum[:0])[:16])
	h.pool.Put(m)
	return id
}

// numberMAC is one keyed HMAC with its input and output buffers, so that
// hashing a number allocates nothing but the id.
type numberMAC struct {
	mac hash.Hash
	in  []byte
	sum [sha256.Size]byte
}

// numberHasher keeps HMACs keyed with one key for reuse: keying one
// costs two SHA-256 blocks and five allocations, and a process uses one
// key (the account's) but while the shared store is down.
type numberHasher struct {
	key  []byte
	pool sync.Pool // of *numberMAC keyed with key
}

var lastNumberHasher atomic.Pointer[numberHasher]

func numberHasherFor(key []byte) *numberHasher {
	if h := lastNumberHasher.Load(); h != nil && bytes.Equal(h.key, key) {
		return h
	}
	k := bytes.Clone(key)
	h := &numberHasher{key: k}
	h.pool.New = func() any { return &numberMAC{mac: hmac.New(sha256.New, k)} }
	lastNumberHasher.Store(h)
	return h
}

// prefixAlarm watches OTP traffic by number range: within each window, once
// at least MinOTP OTPs passed protection, a prefix (the first Digits
// digits) that took Share of them raises the alarm once for that window:
// one counter increment by region and one WARN log with the prefix
// masked. Per process: each replica watches what it accepts.
type prefixAlarm struct {
	cfg config.PrefixAlarmConfig
	log *slog.Logger
	now func() time.Time

	fired    *prometheus.CounterVec
	topShare prometheus.Gauge
	watch    *rangeWatch

	mu     sync.Mutex
	start  time.Time
	total  int
	top    int            // the most OTPs of one prefix this window
	counts map[string]int // bounded by maxAlarmPrefixes
	raised map[string]bool
}

// maxAlarmPrefixes bounds the prefixes counted in one window; OTPs to
// further prefixes count in the total only.
const maxAlarmPrefixes = 4096

func newPrefixAlarm(cfg config.PrefixAlarmConfig, countries []string, reg prometheus.Registerer, log *slog.Logger,
	now func() time.Time) (*prefixAlarm, error) {
	a := &prefixAlarm{cfg: cfg, log: log, now: now, counts: map[string]int{}, raised: map[string]bool{}}
	a.fired = metricdef.CounterVec("smsgw_protection_prefix_alarms_total",
		"Times one number range took protection.prefix_alarm.share of the OTPs of a window, by the range's region.", "region")
	a.topShare = metricdef.Gauge("smsgw_protection_otp_top_prefix_share",
		"Share of this window's OTPs taken by its busiest number range (0 until min_otp OTPs).")
	if err := metricdef.Register(reg, a.fired, a.topShare); err != nil {
		return nil, fmt.Errorf("gateway: protection metrics: %w", err)
	}
	var err error
	if a.watch, err = newRangeWatch(reg, countries); err != nil {
		return nil, err
	}
	// Exposed from the start (at 0) for the allowed regions, where every
	// otp that passes protection goes, and "unknown".
	for _, r := range append([]string{"unknown"}, countries...) {
		a.fired.WithLabelValues(r)
	}
	return a, nil
}

// observe counts one OTP to e164 that passed protection.
func (a *prefixAlarm) observe(e164 string) {
	now := a.now()
	prefix := sms.NumberPrefix(e164, a.cfg.Digits)
	a.mu.Lock()
	if now.Sub(a.start) >= a.cfg.Window || now.Before(a.start) {
		a.start, a.total, a.top = now, 0, 0
		clear(a.counts)
		clear(a.raised)
		a.topShare.Set(0)
	}
	a.total++
	n, held := a.counts[prefix]
	if held || len(a.counts) < maxAlarmPrefixes {
		n++
		a.counts[prefix] = n
	}
	a.top = max(a.top, n)
	total, distinct := a.total, len(a.counts)
	share := float64(n) / float64(total)
	if total < a.cfg.MinOTP {
		a.mu.Unlock()
		a.watch.seen(e164, distinct)
		return
	}
	a.topShare.Set(float64(a.top) / float64(total))
	raise := share >= a.cfg.Share && !a.raised[prefix]
	if raise {
		a.raised[prefix] = true
	}
	a.mu.Unlock()
	a.watch.seen(e164, distinct)
	if !raise {
		return
	}
	if a.cfg.Hold > 0 {
		a.watch.hold(prefix, now.Add(a.cfg.Hold))
	}
	region := alarmRegion(e164)
	a.fired.WithLabelValues(region).Inc()
	a.log.Warn("OTP velocity alarm: one number range takes a large share of OTP traffic (possible SMS pumping)",
		"prefix", maskPrefix(prefix, len(e164)), "region", region, "share", share, "otp_in_range", n,
		"otp_in_window", total, "window", a.cfg.Window, "hold", a.cfg.Hold)
}

// heldFor is how long OTPs to e164's range stay held (0: not held).
func (a *prefixAlarm) heldFor(e164 string) time.Duration {
	if a.cfg.Hold <= 0 {
		return 0
	}
	return a.watch.heldFor(sms.NumberPrefix(e164, a.cfg.Digits), a.now())
}

// alarmRegion is the region label: an ISO region, "001" for non-geographic
// networks, or "unknown" — a closed set.
func alarmRegion(e164 string) string {
	d := sms.DestinationOf(e164)
	if sms.ValidRegion(d.Region) || d.Region == sms.RegionNonGeo {
		return d.Region
	}
	return "unknown"
}

// maskPrefix writes a prefix as the number range it stands for:
// "+81901" of a 13-character number is "+81901*******".
func maskPrefix(prefix string, length int) string {
	return prefix + strings.Repeat("*", max(length-len(prefix), 1))
}
