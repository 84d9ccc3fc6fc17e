package admission

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
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

// Sender pools (producers[].sender_pools): a message that names no from is
// given one at admission, before anything reads its sender (the send-time
// estimate, the queue's sender lanes, receipts, reply routing), so that
// from then on it is a message like any other:
//
//   - a class with a pool: the sender its recipient holds in the pool
//     while that lasts (sticky, shared by every replica through
//     state.StickySenders, restarted by each message to it), else the
//     pool's sender with the earliest free slot;
//   - a class without one: the producer's first sender (none when it has
//     no senders: the provider's default).
//
// The earliest free slot is this process's: per pool sender, the virtual
// time at which the work assigned to it will have been sent, advanced by a
// message's cost over the sender's max_rps from the later of now and that
// time. The sender whose time is earliest wins, ties in pool order; a
// sender the dispatcher knows to be paused is passed over while another
// is not. With N replicas each assigns in proportion to the rates, so a
// campaign moves at its pool's summed rate.
//
// A sticky store that fails (or Redis known down) costs the message
// nothing: it is assigned by the earliest free slot alone, counted under
// how="store_failed".

// Pools assigns the senders of messages that name none. Built once by
// NewPools; its clocks are its only changing state.
type Pools struct {
	producers map[string]*producerPools
	rates     map[string]float64 // a pool sender's max_rps (limits.senders, else limits.target_rps)

	// Sticky is the shared store of recipients' senders.
	Sticky state.StickySenders
	// NumberKey is the account's number key, which sticky keys are hashed
	// with (Protector.NumberKey); nil: no stickiness.
	NumberKey func(ctx context.Context) ([]byte, error)
	// Outage is this process's knowledge of Redis failures: while one is
	// recent the sticky store is not asked. nil: always asked.
	Outage *limiter.Outage
	// Paused is how long the dispatcher knows a sender to be paused; nil:
	// none is.
	Paused func(sender string) time.Duration
	Log    *slog.Logger

	mu     sync.Mutex
	clocks map[string]int64 // pool sender → Unix ns its assigned work will have been sent by

	assigned *prometheus.CounterVec // producer, class, sender, how
	lastWarn atomic.Int64
}

type producerPools struct {
	def       string // the producer's first sender, normalized; "" none
	pools     [NumClasses][]string
	stickyFor time.Duration
}

// How a pool sender was assigned (the how label).
const (
	assignedSticky      = "sticky"       // the recipient's sender in the pool
	assignedNew         = "new"          // the earliest free slot; the recipient now holds it
	assignedStoreFailed = "store_failed" // the earliest free slot, the sticky store unavailable
)

// NewPools builds the pools of cfg's producers; nil when none has one.
// Its metric series are those of the configured pool senders only.
func NewPools(cfg config.Config, reg prometheus.Registerer, log *slog.Logger) (*Pools, error) {
	p := &Pools{producers: map[string]*producerPools{}, rates: map[string]float64{}, clocks: map[string]int64{}, Log: log}
	p.assigned = metricdef.CounterVec("smsgw_sender_pool_assignments_total",
		"Messages without a from given a sender of their producer's pool for their class, by producer, class, sender (a number masked) and how (sticky, new, store_failed).",
		"producer", "class", "sender", "how")
	pooled := false
	for _, pr := range cfg.Producers {
		pp := &producerPools{stickyFor: pr.StickyFor()}
		if len(pr.Senders) > 0 {
			pp.def = pr.Senders[0]
			if n, err := sms.NormalizeSender(pp.def); err == nil {
				pp.def = n
			}
		}
		for _, cl := range sms.Classes {
			pool := pr.SenderPool(cl)
			pp.pools[cl] = pool
			for _, s := range pool {
				pooled = true
				p.rates[s] = senderRate(cfg.Limits, s)
				for _, how := range []string{assignedSticky, assignedNew, assignedStoreFailed} {
					p.assigned.WithLabelValues(pr.Name, cl.String(), sms.SenderLabel(s), how)
				}
			}
		}
		p.producers[pr.Name] = pp
	}
	if !pooled {
		return nil, nil
	}
	if err := metricdef.Register(reg, p.assigned); err != nil {
		return nil, fmt.Errorf("gateway: sender pool metrics: %w", err)
	}
	return p, nil
}

// senderRate is the rate a pool sender's clock advances at: its own limit,
// else the account's.
func senderRate(l config.LimitsConfig, s string) float64 {
	for name, sl := range l.Senders {
		if n, err := sms.NormalizeSender(name); (name == s || err == nil && n == s) && sl.MaxRPS > 0 {
			return sl.MaxRPS
		}
	}
	return max(l.TargetRPS, 1)
}

// assignSenders gives each of ms that names no sender its producer's
// sender for its class (see Pools); p may be nil (no pools: the first
// sender alone, which the API fills in itself).
func (p *Pools) assignSenders(ctx context.Context, producer string, ms []*sms.Message, countSegments bool, now time.Time) {
	if p == nil {
		return
	}
	pp := p.producers[producer]
	if pp == nil {
		return
	}
	var pooled []*sms.Message
	for _, m := range ms {
		switch {
		case m.From != "":
		case len(pp.pools[m.Class]) == 0:
			m.From = pp.def
		default:
			pooled = append(pooled, m)
		}
	}
	if len(pooled) == 0 {
		return
	}
	// The earliest free slot of each, as if every recipient were new.
	p.mu.Lock()
	clocks := make(map[string]int64, len(p.rates))
	for _, m := range pooled {
		for _, s := range pp.pools[m.Class] {
			if _, ok := clocks[s]; !ok {
				clocks[s] = p.clocks[s]
			}
		}
	}
	p.mu.Unlock()
	nowNs := now.UnixNano()
	want := make([]string, len(pooled))
	for i, m := range pooled {
		want[i] = p.earliest(pp.pools[m.Class], clocks, nowNs)
		clocks[want[i]] = p.advance(clocks[want[i]], want[i], m.Cost(countSegments), nowNs)
	}
	got, how := p.stick(ctx, producer, pp, pooled, want)
	p.mu.Lock()
	for i, m := range pooled {
		m.From = got[i]
		p.clocks[m.From] = p.advance(p.clocks[m.From], m.From, m.Cost(countSegments), nowNs)
	}
	p.mu.Unlock()
	for i, m := range pooled {
		p.assigned.WithLabelValues(producer, m.Class.String(), sms.SenderLabel(m.From), how[i]).Inc()
	}
}

// earliest is the sender of pool whose clock is earliest (ties: pool
// order), passing over the paused ones while one is not.
func (p *Pools) earliest(pool []string, clocks map[string]int64, now int64) string {
	best, bestAt, bestPaused := "", int64(0), true
	for _, s := range pool {
		at := max(clocks[s], now)
		paused := p.Paused != nil && p.Paused(s) > 0
		if best == "" || bestPaused && !paused || paused == bestPaused && at < bestAt {
			best, bestAt, bestPaused = s, at, paused
		}
	}
	return best
}

// advance is sender's clock c after a message of cost units.
func (p *Pools) advance(c int64, sender string, cost int, now int64) int64 {
	return max(c, now) + int64(float64(cost)/p.rates[sender]*float64(time.Second))
}

// stick asks the sticky store for each message's sender: the one its
// recipient holds when that is still in the pool, else want[i], which the
// recipient then holds.
func (p *Pools) stick(ctx context.Context, producer string, pp *producerPools, ms []*sms.Message, want []string) ([]string, []string) {
	how := make([]string, len(ms))
	for i := range how {
		how[i] = assignedStoreFailed
	}
	if p.Sticky == nil || p.NumberKey == nil || p.Outage != nil && p.Outage.Recent() {
		return want, how
	}
	key, err := p.NumberKey(ctx)
	if err != nil {
		p.failed(ctx, err)
		return want, how
	}
	keys := make([]string, len(ms))
	for i, m := range ms {
		keys[i] = NumberID(key, "sender-pool\x00"+producer+"\x00"+m.Class.String()+"\x00"+m.To)
	}
	held, err := p.Sticky.Stick(ctx, keys, want, pp.stickyFor)
	if err != nil {
		p.failed(ctx, err)
		return want, how
	}
	got := make([]string, len(ms))
	for i, m := range ms {
		switch h := held[i]; {
		case h == "":
			got[i], how[i] = want[i], assignedNew
		case slices.Contains(pp.pools[m.Class], h):
			got[i], how[i] = h, assignedSticky
		default: // a sender since taken out of the pool: the recipient moves
			got[i], how[i] = want[i], assignedNew
			if err := p.Sticky.Set(ctx, keys[i], want[i], pp.stickyFor); err != nil {
				p.failed(ctx, err)
			}
		}
	}
	return got, how
}

// failed notes a failure of the sticky store, logged at most every
// fallbackWarnEvery.
func (p *Pools) failed(ctx context.Context, err error) {
	if p.Outage != nil && ctx.Err() == nil {
		p.Outage.Failed()
	}
	now := time.Now().UnixNano()
	last := p.lastWarn.Load()
	if p.Log != nil && now-last >= int64(fallbackWarnEvery) && p.lastWarn.CompareAndSwap(last, now) {
		p.Log.WarnContext(ctx, "sender pools: sticky store failing; senders are assigned by the earliest free slot alone", "err", err)
	}
}
