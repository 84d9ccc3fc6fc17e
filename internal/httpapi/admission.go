package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"smsgw/internal/limiter"
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

// Ingress is the per-producer GCRA: limiter.LocalKeys embedded, and with
// Redis limiter.SharedKeys, which decides on Redis and, while Redis fails,
// in this process under the send limiter's breaker policy. It is a courtesy
// limit; the provider rate is guarded by the dispatcher.
type Ingress struct {
	Keys limiter.KeyLimiter
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
func (s *Server) admitIngress(ctx context.Context, w http.ResponseWriter, p *Producer, n int) (int, error) {
	granted, d, err := s.Ingress.allowN(ctx, p, n)
	if err != nil {
		return 0, fmt.Errorf("ingress limiter: %w", err)
	}
	setRateLimitHeaders(w, p.Ingress, d)
	if granted == 0 {
		s.BodyGate.refused(p, d, time.Now())
		return 0, rateLimited(p, d.RetryAfter)
	}
	return granted, nil
}

// rateLimited is the 429 of a producer over its ingress rate.
func rateLimited(p *Producer, retryAfter time.Duration) *apiError {
	return &apiError{Kind: KindRateLimited, RetryAfter: retryAfter,
		Detail: fmt.Sprintf("producer %s may send %g messages/s with a burst of %d; retry after the Retry-After seconds",
			p.Name, p.Ingress.PerSecond, p.Ingress.Burst)}
}

// allowN wraps allow for a producer.
func (g *Ingress) allowN(ctx context.Context, p *Producer, n int) (int, limiter.KeyDecision, error) {
	want := n
	cost := min(want, p.Ingress.Burst)
	d, err := g.Keys.Allow(ctx, p.Name, p.Ingress, cost)
	if err != nil {
		return 0, d, err
	}
	if d.Allowed {
		return cost, d, nil
	}
	if cost > 1 && d.Remaining > 0 {
		// A batch takes what fits now rather than nothing.
		part := min(d.Remaining, cost)
		d2, err := g.Keys.Allow(ctx, p.Name, p.Ingress, part)
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
func (s *Server) admitOutstanding(ctx context.Context, p *Producer, n int) (int, error) {
	if p.MaxOutstanding <= 0 {
		return n, nil
	}
	out, err := s.Queue.Outstanding(ctx, p.Name)
	if err != nil {
		return 0, fmt.Errorf("queue outstanding %s: %w", p.Name, err)
	}
	room := p.MaxOutstanding - out
	if room <= 0 {
		return 0, s.tooManyQueued(p, out)
	}
	return int(min(int64(n), room)), nil
}

// tooManyQueued is the 429 of a producer with out messages outstanding,
// at or over its max_outstanding.
func (s *Server) tooManyQueued(p *Producer, out int64) *apiError {
	excess := float64(out - p.MaxOutstanding + 1)
	return &apiError{Kind: kindTooManyQueued,
		RetryAfter: time.Duration(excess / s.Cfg.Limits.TargetRPS * float64(time.Second)),
		Detail: fmt.Sprintf("producer %s has %d messages queued or in flight; at most %d are allowed",
			p.Name, out, p.MaxOutstanding),
		Extra: map[string]any{"outstanding": out, "max_outstanding": p.MaxOutstanding}}
}
