package gateway

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
// OTP latency. observedProvider wraps the provider the dispatcher calls and
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

	"smsgw/internal/dispatch"
	"smsgw/internal/provider"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

const (
	totalsEvery       = time.Second
	totalsIdleEvery   = 10 * time.Second // while the replica sends nothing (ticker.quiet)
	rateWindow        = 10 * time.Second
	otpLatencySamples = 1000
	totalsFlushBound  = 2 * time.Second // the final flush of a stopping replica
)

// Scopes of the counters.
const (
	scopeShared  = "shared"  // every replica of the account, from the Redis hash
	scopeProcess = "process" // this process since it started
)

// totals are the cumulative counters of the stats answer.
type totals struct {
	classes    [sms.ClassMarketing + 1]dispatch.ClassCounts
	throttled  int64            // provider 429s
	otpRefused int64            // fast-path 503s
	refused    [nRefusals]int64 // protection refusals by reason
}

func totalsOf(s dispatch.Snapshot) totals {
	var t totals
	for c, cc := range s.Classes {
		if c.Valid() {
			t.classes[c] = cc
		}
	}
	t.throttled = s.Throttled
	t.otpRefused = s.SendNow.Refused()
	return t
}

// fields names every counter as a field of the counters store.
func (t *totals) fields() map[string]*int64 {
	out := map[string]*int64{"throttled": &t.throttled, "otp_unavailable": &t.otpRefused}
	for r := range nRefusals {
		out["refused:"+r.String()] = &t.refused[r]
	}
	for _, c := range sms.Classes {
		cc := &t.classes[c]
		n := c.String()
		out["sent:"+n], out["failed:"+n], out["expired:"+n], out["dead:"+n] = &cc.Sent, &cc.Failed, &cc.Expired, &cc.Dead
	}
	return out
}

// totalsFields is the field set of the counters store.
func totalsFields() []string {
	var t totals
	return slices.Sorted(maps.Keys(t.fields()))
}

// values is t as store fields, without the zero ones.
func (t totals) values() map[string]int64 {
	out := map[string]int64{}
	for f, p := range t.fields() {
		if *p != 0 {
			out[f] = *p
		}
	}
	return out
}

func totalsFrom(values map[string]int64) totals {
	var t totals
	for f, p := range t.fields() {
		*p = values[f]
	}
	return t
}

// plus returns t + sign·o, field by field.
func (t totals) plus(o totals, sign int64) totals {
	a, b := t.fields(), o.fields()
	for k, p := range a {
		*p += sign * *b[k]
	}
	return t
}

func (t totals) sent() int64 {
	var n int64
	for _, c := range t.classes {
		n += c.Sent
	}
	return n
}

type rateSample struct {
	at   time.Time // monotonic
	sent int64
}

// totalsLoop keeps the counters: this process's increments flushed to the
// counters store every period, and the store read back.
type totalsLoop struct {
	snap    func() dispatch.Snapshot
	refused func() [nRefusals]int64 // protection's; nil: none
	store   state.Counters
	scope   string // scopeShared or scopeProcess
	log     *slog.Logger
	started time.Time
	every   time.Duration
	t       ticker

	mu      sync.Mutex
	flushed totals // this process's counts already added to the store
	since   time.Time
	samples []rateSample // oldest first, spanning at most rateWindow
	failing bool
}

func newTotalsLoop(snap func() dispatch.Snapshot, store state.Counters, scope string, log *slog.Logger, now time.Time) *totalsLoop {
	return &totalsLoop{snap: snap, store: store, scope: scope, log: log, started: now, since: now, every: totalsEvery}
}

// runOnce flushes this process's increments and samples the stored sent
// total for the rate.
func (l *totalsLoop) runOnce(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.current()
	stored, since, err := l.store.Add(ctx, cur.plus(l.flushed, -1).values())
	if err != nil {
		if !l.failing {
			l.log.Warn("stats: counters not updated; retrying every second", "scope", l.scope, "err", err)
		}
		l.failing = true
		return fmt.Errorf("stats: flush counters: %w", err)
	}
	if l.failing {
		l.log.Info("stats: counters updated again", "scope", l.scope)
	}
	l.failing = false
	l.flushed = cur
	if !since.IsZero() {
		l.since = since
	}
	now := time.Now()
	l.samples = append(l.samples, rateSample{at: now, sent: totalsFrom(stored).sent()})
	i := 0
	for i < len(l.samples)-1 && now.Sub(l.samples[i+1].at) >= rateWindow {
		i++ // keep one sample at least rateWindow old
	}
	l.samples = slices.Delete(l.samples, 0, i)
	return nil
}

// read returns the counters now, their scope and since when they count.
func (l *totalsLoop) read(ctx context.Context) (totals, string, time.Time, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	values, since, err := l.store.Read(ctx)
	if err != nil {
		return totals{}, "", time.Time{}, fmt.Errorf("stats: read counters: %w", err)
	}
	if since.IsZero() {
		since = l.since
	}
	// This process's increments not flushed yet count at once.
	return totalsFrom(values).plus(l.current().plus(l.flushed, -1), 1), l.scope, since, nil
}

// current is this process's counts now: the dispatcher's and protection's.
func (l *totalsLoop) current() totals {
	t := totalsOf(l.snap())
	if l.refused != nil {
		t.refused = l.refused()
	}
	return t
}

// rate is the sent rate over the samples (at most the last rateWindow).
func (l *totalsLoop) rate() float64 {
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
func (l *totalsLoop) Start(ctx context.Context) { l.t.start(ctx, l.every, l.runOnce) }

// Stop ends the loop and flushes a last time, so that the sends of a
// replica that stops are not missing from the shared totals.
func (l *totalsLoop) Stop() {
	if !l.t.halt() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), totalsFlushBound)
	defer cancel()
	_ = l.runOnce(ctx) // logged by runOnce
}

// latencyWindow keeps the last n durations.
type latencyWindow struct {
	mu   sync.Mutex
	buf  []time.Duration
	next int
	n    int
}

func newLatencyWindow(n int) *latencyWindow { return &latencyWindow{buf: make([]time.Duration, n)} }

func (w *latencyWindow) add(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf[w.next] = max(d, 0)
	w.next = (w.next + 1) % len(w.buf)
	w.n = min(w.n+1, len(w.buf))
}

// quantiles returns the nearest-rank quantiles qs of the window and how
// many samples it holds (0: no quantiles).
func (w *latencyWindow) quantiles(qs ...float64) ([]time.Duration, int) {
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

// observedProvider records the accept-to-provider time of every OTP the
// provider accepts.
type observedProvider struct {
	provider.Provider
	now func() time.Time
	otp *latencyWindow
}

func (p observedProvider) Send(ctx context.Context, req *provider.Request) (provider.Result, error) {
	at := p.now()
	res, err := p.Provider.Send(ctx, req)
	if err == nil && req.Class == sms.ClassOTP && !req.AcceptedAt.IsZero() {
		p.otp.add(at.Sub(req.AcceptedAt))
	}
	return res, err
}

// replica describes this process in the stats answer.
type replica struct {
	owner   string
	mode    string // embedded | redis
	started time.Time
}

// liveStats is what the stats handler reads besides queue and limiter.
type liveStats struct {
	replica      replica
	providerName string
	snap         func() dispatch.Snapshot
	totals       *totalsLoop
	otp          *latencyWindow
}
