package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/limiter"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// Admission decides, in this order, whether a producer's request may go
// on; every check before the ingress GCRA only reads, and the GCRA records
// nothing when it denies, so a refused request costs the producer nothing:
//
//  1. the bearer key and the class (router, handlers);
//  2. max_outstanding: queued + in flight, read from the queue;
//  3. the TTL against the backlog ahead (estimated_send_at);
//  4. the ingress GCRA (rate, burst), shared through Redis when configured.
//
// max_outstanding is read and then enqueued, not one atomic step: under
// concurrent requests a producer may overshoot it by the requests in
// flight. It bounds a backlog, not a rate, so that slack is harmless.

// ingress is the per-producer GCRA: limiter.LocalKeys embedded, and with
// Redis limiter.SharedKeys, which decides on Redis and, while Redis fails,
// in this process under the send limiter's breaker policy. It is a courtesy
// limit; the provider rate is guarded by the dispatcher.
type ingress struct {
	keys limiter.KeyLimiter
}

// setRateLimitHeaders writes the RateLimit-Limit/-Remaining/-Reset fields
// (draft-ietf-httpapi-ratelimit-headers, the widely deployed separate-field
// form): Limit is the burst, Remaining what could pass now, Reset the
// seconds until the full burst is back.
func setRateLimitHeaders(w http.ResponseWriter, r limiter.Rate, d limiter.KeyDecision) {
	h := w.Header()
	h.Set("RateLimit-Limit", strconv.Itoa(r.Burst))
	h.Set("RateLimit-Remaining", strconv.Itoa(max(0, d.Remaining)))
	reset := int64(0)
	if d.ResetAfter > 0 {
		reset = ceilSeconds(d.ResetAfter)
	}
	h.Set("RateLimit-Reset", strconv.FormatInt(reset, 10))
}

// admitIngress charges n messages to the producer's ingress quota and
// returns how many were granted (n, or fewer for a batch; at least 1).
func (s *server) admitIngress(ctx context.Context, w http.ResponseWriter, p *producer, n int) (int, error) {
	granted, d, err := s.ingress.allowN(ctx, p, n)
	if err != nil {
		return 0, fmt.Errorf("ingress limiter: %w", err)
	}
	setRateLimitHeaders(w, p.Ingress, d)
	if granted == 0 {
		return 0, &Error{Kind: KindRateLimited, RetryAfter: d.RetryAfter,
			Detail: fmt.Sprintf("producer %s may send %g messages/s with a burst of %d; retry after the Retry-After seconds",
				p.Name, p.Ingress.PerSecond, p.Ingress.Burst)}
	}
	return granted, nil
}

// allowN wraps allow for a producer.
func (g *ingress) allowN(ctx context.Context, p *producer, n int) (int, limiter.KeyDecision, error) {
	want := n
	cost := min(want, p.Ingress.Burst)
	d, err := g.keys.Allow(ctx, p.Name, p.Ingress, cost)
	if err != nil {
		return 0, d, err
	}
	if d.Allowed {
		return cost, d, nil
	}
	if cost > 1 && d.Remaining > 0 {
		// A batch takes what fits now rather than nothing.
		part := min(d.Remaining, cost)
		d2, err := g.keys.Allow(ctx, p.Name, p.Ingress, part)
		if err != nil {
			return 0, d, err
		}
		if d2.Allowed {
			return part, d2, nil
		}
	}
	return 0, d, nil
}

// admitOutstanding returns how many of n new messages fit under the
// producer's max_outstanding (n when unlimited).
func (s *server) admitOutstanding(ctx context.Context, p *producer, n int) (int, error) {
	if p.MaxOutstanding <= 0 {
		return n, nil
	}
	out, err := s.queue.Outstanding(ctx, p.Name)
	if err != nil {
		return 0, fmt.Errorf("queue outstanding %s: %w", p.Name, err)
	}
	room := p.MaxOutstanding - out
	if room <= 0 {
		excess := float64(out - p.MaxOutstanding + 1)
		return 0, &Error{Kind: KindTooManyQueued,
			RetryAfter: time.Duration(excess / s.cfg.Limits.TargetRPS * float64(time.Second)),
			Detail: fmt.Sprintf("producer %s has %d messages queued or in flight; at most %d are allowed",
				p.Name, out, p.MaxOutstanding),
			Extra: map[string]any{"outstanding": out, "max_outstanding": p.MaxOutstanding}}
	}
	return int(min(int64(n), room)), nil
}

// etaEstimator turns the backlog into a send time. The queue depth is
// read at most every etaRefresh and shared by all requests in between, so
// admission does not add a store round trip per request.
type etaEstimator struct {
	q       queue.Queue
	lim     limiter.Limiter
	pause   *operatorPause
	cfg     config.Config
	now     func() time.Time
	log     *slog.Logger
	refresh time.Duration

	mu         sync.Mutex
	at         time.Time
	ahead      [numClasses]int64 // ready + leased per class
	limitPause time.Duration
	busy       bool
}

const etaRefresh = 250 * time.Millisecond

// backlog returns the messages queued ahead in each class, refreshing them
// when stale. On a store error the last known numbers are used.
func (e *etaEstimator) backlog(ctx context.Context) ([numClasses]int64, time.Duration) {
	e.mu.Lock()
	now := e.now()
	stale := now.Sub(e.at) >= e.refresh
	if !stale || e.busy {
		a, p := e.ahead, e.limitPause
		e.mu.Unlock()
		return a, p
	}
	e.busy = true
	e.mu.Unlock()

	var ahead [numClasses]int64
	stats, err := e.q.Stats(ctx)
	if err == nil {
		for c, st := range stats {
			if c.Valid() {
				ahead[c] = st.Ready + st.Leased
			}
		}
	}
	var pause time.Duration
	if st, serr := e.lim.State(ctx); serr == nil {
		pause = st.PauseRemaining
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	e.busy = false
	if err != nil {
		e.log.WarnContext(ctx, "eta: queue stats failed; using the last known backlog", "err", err)
		return e.ahead, e.limitPause
	}
	e.ahead, e.limitPause, e.at = ahead, pause, now
	return ahead, pause
}

// wait estimates how long until a new message of class c is sent: the
// limiter pause, then the classes above it at the full target rate, then
// its own class at its pace (its cap, if it has one).
func (e *etaEstimator) wait(ctx context.Context, c sms.Class) time.Duration {
	ahead, pause := e.backlog(ctx)
	target := e.cfg.Limits.TargetRPS
	secs := 0.0
	for hc := sms.Class(0); hc < c; hc++ {
		secs += float64(ahead[hc]) / target
	}
	secs += float64(ahead[c]) / e.pace(c)
	return pause + e.pause.remaining(e.now()) + time.Duration(secs*float64(time.Second))
}

// pace is how many messages of class c go per second when it has the
// provider to itself: the target rate, or the class cap below it.
func (e *etaEstimator) pace(c sms.Class) float64 {
	pace := e.cfg.Limits.TargetRPS
	if cl, ok := e.cfg.Limits.Classes[c.String()]; ok && cl.MaxRPS > 0 && cl.MaxRPS < pace {
		pace = cl.MaxRPS
	}
	return pace
}

// admitTTL refuses a message that would expire before its turn.
func (s *server) admitTTL(wait, ttl time.Duration, now time.Time) error {
	if ttl <= 0 || wait < ttl {
		return nil
	}
	eta := now.Add(wait).UTC()
	return &Error{Kind: KindExpiresBeforeSend, RetryAfter: wait - ttl,
		Detail: fmt.Sprintf("the backlog ahead would take until %s, past the message's TTL of %s; send it later or with a longer ttl_seconds",
			eta.Format(time.RFC3339), ttl),
		Extra: map[string]any{"estimated_send_at": eta.Format(time.RFC3339Nano), "ttl_seconds": int64(ttl / time.Second)}}
}
