package gateway

// The figures of GET /v1/admin/stats that are not queue or limiter state:
// outcome counters, the achieved send rate, OTP latency and this replica.
//
// Counters. Each replica's dispatcher counts what it ended (dispatch.Snapshot).
// Embedded, those are the figures (since this process started). With Redis
// a totals loop adds each replica's increments, once a second, to one hash
// under the account's hash tag, so every replica answers the same
// account-wide totals whichever one the dashboard's poll reaches. The hash
// keeps counting across restarts; its "since" field says from when.
//
// Rate. The loop samples the (shared or process) sent total once a second;
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
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/dispatch"
	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

const (
	totalsEvery       = time.Second
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
	throttled  int64 // provider 429s
	otpRefused int64 // fast-path 503s
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

// fields names every counter as a field of the shared hash.
func (t *totals) fields() map[string]*int64 {
	out := map[string]*int64{"throttled": &t.throttled, "otp_unavailable": &t.otpRefused}
	for _, c := range sms.Classes {
		cc := &t.classes[c]
		n := c.String()
		out["sent:"+n], out["failed:"+n], out["expired:"+n], out["dead:"+n] = &cc.Sent, &cc.Failed, &cc.Expired, &cc.Dead
	}
	return out
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

// sinceField is the hash field holding when the shared counters began (Unix ms).
const sinceField = "since_ms"

type rateSample struct {
	at   time.Time // monotonic
	sent int64
}

// totalsLoop keeps the counters: read from this process, and with Redis
// flushed to and read from the account's shared hash.
type totalsLoop struct {
	snap    func() dispatch.Snapshot
	c       redis.UniversalClient // nil: embedded, process counters
	key     string
	log     *slog.Logger
	started time.Time
	every   time.Duration

	mu      sync.Mutex
	flushed totals // this process's counts already added to the hash
	since   time.Time
	samples []rateSample // oldest first, spanning at most rateWindow
	failing bool

	stop chan struct{}
	done chan struct{}
}

func newTotalsLoop(snap func() dispatch.Snapshot, c redis.UniversalClient, key string, log *slog.Logger, now time.Time) *totalsLoop {
	return &totalsLoop{snap: snap, c: c, key: key, log: log, started: now, since: now, every: totalsEvery}
}

// runOnce flushes this process's increments (Redis mode) and samples the
// sent total for the rate.
func (l *totalsLoop) runOnce(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := totalsOf(l.snap())
	sent := cur.sent()
	if l.c != nil {
		shared, since, err := l.flush(ctx, cur)
		if err != nil {
			if !l.failing {
				l.log.Warn("stats: shared counters not updated; retrying every second", "err", err)
			}
			l.failing = true
			return err
		}
		if l.failing {
			l.log.Info("stats: shared counters updated again")
		}
		l.failing = false
		sent, l.since = shared.sent(), since
	}
	now := time.Now()
	l.samples = append(l.samples, rateSample{at: now, sent: sent})
	i := 0
	for i < len(l.samples)-1 && now.Sub(l.samples[i+1].at) >= rateWindow {
		i++ // keep one sample at least rateWindow old
	}
	l.samples = slices.Delete(l.samples, 0, i)
	return nil
}

// flush adds cur − flushed to the hash and reads it back, in one
// transaction on one key. Callers hold mu.
func (l *totalsLoop) flush(ctx context.Context, cur totals) (totals, time.Time, error) {
	delta := cur.plus(l.flushed, -1)
	pipe := l.c.TxPipeline()
	for f, v := range delta.fields() {
		if *v != 0 {
			pipe.HIncrBy(ctx, l.key, f, *v)
		}
	}
	pipe.HSetNX(ctx, l.key, sinceField, time.Now().UnixMilli())
	all := pipe.HGetAll(ctx, l.key)
	if _, err := pipe.Exec(ctx); err != nil {
		return totals{}, time.Time{}, fmt.Errorf("stats: flush %s: %w", l.key, err)
	}
	l.flushed = cur
	shared, since := parseTotals(all.Val())
	return shared, since, nil
}

// read returns the counters now, their scope and since when they count.
func (l *totalsLoop) read(ctx context.Context) (totals, string, time.Time, error) {
	if l.c == nil {
		return totalsOf(l.snap()), scopeProcess, l.started, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	all, err := l.c.HGetAll(ctx, l.key).Result()
	if err != nil {
		return totals{}, "", time.Time{}, fmt.Errorf("stats: read %s: %w", l.key, err)
	}
	shared, since := parseTotals(all)
	if since.IsZero() {
		since = l.since
	}
	// This process's increments not flushed yet count at once.
	return shared.plus(totalsOf(l.snap()).plus(l.flushed, -1), 1), scopeShared, since, nil
}

func parseTotals(h map[string]string) (totals, time.Time) {
	var t totals
	for f, p := range t.fields() {
		if v, err := strconv.ParseInt(h[f], 10, 64); err == nil {
			*p = v
		}
	}
	var since time.Time
	if ms, err := strconv.ParseInt(h[sinceField], 10, 64); err == nil {
		since = time.UnixMilli(ms).UTC()
	}
	return t, since
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

// start runs the loop until close.
func (l *totalsLoop) start(ctx context.Context) {
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(l.done)
		t := time.NewTicker(l.every)
		defer t.Stop()
		for {
			rctx, cancel := context.WithTimeout(ctx, l.every)
			_ = l.runOnce(rctx) // logged by runOnce
			cancel()
			select {
			case <-t.C:
			case <-l.stop:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
}

// close stops the loop and flushes a last time, so that the sends of a
// replica that stops are not missing from the shared totals.
func (l *totalsLoop) close(ctx context.Context) {
	if l.stop == nil {
		return
	}
	close(l.stop)
	<-l.done
	l.stop = nil
	if l.c != nil {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), totalsFlushBound)
		defer cancel()
		_ = l.runOnce(fctx)
	}
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
