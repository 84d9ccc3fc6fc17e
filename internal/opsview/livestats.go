// Package opsview is what operators read: live totals and rates, the
// stats answer's shape, the API, receipt, queue and configuration metrics
// and the send history recorder.
package opsview

// The figures of GET /v1/admin/stats that are not queue or limiter state:
// outcome counters, the achieved send rate, OTP latency and this replica.
//
// Counters. Each replica's dispatcher counts what it ended (dispatch.Snapshot).
// A totals loop adds this replica's increments, once a second, to the
// account's state.Counters: with Redis one hash shared by every replica, so
// each answers the same account-wide totals whichever one the dashboard's
// poll reaches (the hash keeps counting across restarts; its "since" says
// from when); embedded, this process's memory (since it started). The loop
// lives here, not in internal/state, because it turns dispatcher snapshots
// into the stats answer's figures; state only stores the counters.
//
// Rate. The loop samples the stored sent total once a second;
// sent_per_second is the increase over the last rateWindow.
//
// otp latency. observedProvider wraps the provider the dispatcher calls and
// records, for every OTP the provider accepts (queued or fast path), the
// time from the gateway accepting the request to the provider call. The
// last otpLatencySamples of this process are kept.

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"smsgw/internal/admission"
	"smsgw/internal/dispatch"
	"smsgw/internal/provider"
	"smsgw/internal/sms"
	"smsgw/internal/state"
	"smsgw/internal/tick"
)

// How often the totals are kept and read, and how many OTP latencies are
// kept.
const (
	totalsEvery       = time.Second
	TotalsIdleEvery   = 10 * time.Second // while the replica sends nothing (ticker.quiet)
	rateWindow        = 10 * time.Second
	OTPLatencySamples = 1000
	totalsFlushBound  = 2 * time.Second // the final flush of a stopping replica
)

// Scopes of the counters.
const (
	ScopeShared  = "shared"  // every replica of the account, from the Redis hash
	ScopeProcess = "process" // this process since it started
)

// Totals are the cumulative counters of the stats answer.
type Totals struct {
	Classes    [sms.ClassMarketing + 1]dispatch.ClassCounts
	Throttled  int64                      // provider 429s
	OTPRefused int64                      // fast-path 503s
	Refused    [admission.NRefusals]int64 // protection refusals by reason
}

func totalsOf(s dispatch.Snapshot) Totals {
	var t Totals
	for c, cc := range s.Classes {
		if c.Valid() {
			t.Classes[c] = cc
		}
	}
	t.Throttled = s.Throttled
	t.OTPRefused = s.SendNow.Refused()
	return t
}

// fields names every counter as a field of the counters store.
func (t *Totals) fields() map[string]*int64 {
	out := map[string]*int64{"throttled": &t.Throttled, "otp_unavailable": &t.OTPRefused}
	for r := range admission.NRefusals {
		out["refused:"+r.String()] = &t.Refused[r]
	}
	for _, c := range sms.Classes {
		cc := &t.Classes[c]
		n := c.String()
		out["sent:"+n], out["failed:"+n], out["expired:"+n], out["dead:"+n] = &cc.Sent, &cc.Failed, &cc.Expired, &cc.Dead
	}
	return out
}

// TotalsFields is the field set of the counters store.
func TotalsFields() []string {
	var t Totals
	return slices.Sorted(maps.Keys(t.fields()))
}

// Values is t as store fields, without the zero ones.
func (t Totals) Values() map[string]int64 {
	out := map[string]int64{}
	for f, p := range t.fields() {
		if *p != 0 {
			out[f] = *p
		}
	}
	return out
}

// TotalsFrom reads totals back from their stored counter values.
func TotalsFrom(values map[string]int64) Totals {
	var t Totals
	for f, p := range t.fields() {
		*p = values[f]
	}
	return t
}

// plus returns t + sign·o, field by field.
func (t Totals) plus(o Totals, sign int64) Totals {
	a, b := t.fields(), o.fields()
	for k, p := range a {
		*p += sign * *b[k]
	}
	return t
}

func (t Totals) sent() int64 {
	var n int64
	for _, c := range t.Classes {
		n += c.Sent
	}
	return n
}

type rateSample struct {
	at   time.Time // monotonic
	sent int64
}

// TotalsLoop keeps the counters: this process's increments flushed to the
// counters store every period, and the store read back.
type TotalsLoop struct {
	snap    func() dispatch.Snapshot
	Refused func() [admission.NRefusals]int64 // protection's; nil: none
	store   state.Counters
	Scope   string // scopeShared or scopeProcess
	log     *slog.Logger
	started time.Time
	every   time.Duration
	T       tick.Ticker

	mu      sync.Mutex
	flushed Totals // this process's counts already added to the store
	since   time.Time
	samples []rateSample // oldest first, spanning at most rateWindow
	failing bool
}

// NewTotalsLoop keeps this replica's totals in store and reads the account's
// back.
func NewTotalsLoop(snap func() dispatch.Snapshot, store state.Counters, scope string, log *slog.Logger, now time.Time) *TotalsLoop {
	return &TotalsLoop{snap: snap, store: store, Scope: scope, log: log, started: now, since: now, every: totalsEvery}
}

// runOnce flushes this process's increments and samples the stored sent
// total for the rate.
func (l *TotalsLoop) runOnce(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.current()
	stored, since, err := l.store.Add(ctx, cur.plus(l.flushed, -1).Values())
	if err != nil {
		if !l.failing {
			l.log.Warn("stats: counters not updated; retrying every second", "scope", l.Scope, "err", err)
		}
		l.failing = true
		return fmt.Errorf("stats: flush counters: %w", err)
	}
	if l.failing {
		l.log.Info("stats: counters updated again", "scope", l.Scope)
	}
	l.failing = false
	l.flushed = cur
	if !since.IsZero() {
		l.since = since
	}
	now := time.Now()
	l.samples = append(l.samples, rateSample{at: now, sent: TotalsFrom(stored).sent()})
	i := 0
	for i < len(l.samples)-1 && now.Sub(l.samples[i+1].at) >= rateWindow {
		i++ // keep one sample at least rateWindow old
	}
	l.samples = slices.Delete(l.samples, 0, i)
	return nil
}

// Read returns the counters now, their scope and since when they count.
func (l *TotalsLoop) Read(ctx context.Context) (Totals, string, time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	values, since, err := l.store.Read(ctx)
	if err != nil {
		return Totals{}, "", time.Time{}, fmt.Errorf("stats: read counters: %w", err)
	}
	if since.IsZero() {
		since = l.since
	}
	// This process's increments not flushed yet count at once.
	return TotalsFrom(values).plus(l.current().plus(l.flushed, -1), 1), l.Scope, since, nil
}

// current is this process's counts now: the dispatcher's and protection's.
func (l *TotalsLoop) current() Totals {
	t := totalsOf(l.snap())
	if l.Refused != nil {
		t.Refused = l.Refused()
	}
	return t
}

// Rate is the sent rate over the samples (at most the last rateWindow).
func (l *TotalsLoop) Rate() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.samples) < 2 {
		return 0
	}
	a, b := l.samples[0], l.samples[len(l.samples)-1]
	dt := b.at.Sub(a.at).Seconds()
	if dt <= 0 || b.sent < a.sent {
		return 0
	}
	return float64(b.sent-a.sent) / dt
}

// Start runs the loop until Stop or until ctx ends.
func (l *TotalsLoop) Start(ctx context.Context) { l.T.Start(ctx, l.every, l.runOnce) }

// Stop ends the loop and flushes a last time, so that the sends of a
// replica that stops are not missing from the shared totals.
func (l *TotalsLoop) Stop() {
	if !l.T.Halt() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), totalsFlushBound)
	defer cancel()
	_ = l.runOnce(ctx) // logged by runOnce
}

// LatencyWindow keeps the last n durations.
type LatencyWindow struct {
	mu   sync.Mutex
	buf  []time.Duration
	next int
	n    int
}

// NewLatencyWindow keeps the last n latencies.
func NewLatencyWindow(n int) *LatencyWindow { return &LatencyWindow{buf: make([]time.Duration, n)} }

// Add keeps d, dropping the oldest once the window is full.
func (w *LatencyWindow) Add(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf[w.next] = max(d, 0)
	w.next = (w.next + 1) % len(w.buf)
	w.n = min(w.n+1, len(w.buf))
}

// Quantiles returns the nearest-rank quantiles qs of the window and how
// many samples it holds (0: no quantiles).
func (w *LatencyWindow) Quantiles(qs ...float64) ([]time.Duration, int) {
	w.mu.Lock()
	s := slices.Clone(w.buf[:w.n])
	w.mu.Unlock()
	if len(s) == 0 {
		return nil, 0
	}
	slices.Sort(s)
	out := make([]time.Duration, len(qs))
	for i, q := range qs {
		rank := int(math.Ceil(q * float64(len(s))))
		out[i] = s[min(max(rank, 1), len(s))-1]
	}
	return out, len(s)
}

// ObservedProvider records the accept-to-provider time of every OTP the
// provider accepts.
type ObservedProvider struct {
	provider.Provider
	Now func() time.Time
	OTP *LatencyWindow
}

// Send sends through the wrapped provider and records the accept-to-provider
// time of an OTP.
func (p ObservedProvider) Send(ctx context.Context, req *provider.Request) (provider.Result, error) {
	at := p.Now()
	res, err := p.Provider.Send(ctx, req)
	if err == nil && req.Class == sms.ClassOTP && !req.AcceptedAt.IsZero() {
		p.OTP.Add(at.Sub(req.AcceptedAt))
	}
	return res, err
}

// Replica describes this process in the stats answer.
type Replica struct {
	Owner   string
	Mode    string // embedded | redis
	Started time.Time
}

// LiveStats is what the stats handler reads besides queue and limiter.
type LiveStats struct {
	Replica      Replica
	ProviderName string
	Snap         func() dispatch.Snapshot
	Totals       *TotalsLoop
	OTP          *LatencyWindow
	Lanes        *SenderLanes // the stats answer's sender_lanes
}
