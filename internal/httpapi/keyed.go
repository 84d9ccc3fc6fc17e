package httpapi

import (
	"context"
	"fmt"
	"time"
)

// A request with an Idempotency-Key makes the gateway keep its first
// answer (and the queue its key's mapping) for the idempotency window,
// whatever then happens to the message: a producer that keys every
// request and cancels each would otherwise make the stores keep a day of
// its ingress rate. producers[].max_keyed_per_day bounds it: a GCRA of
// that many a day with a burst of as many, so at most about twice the
// bound is kept at any time. A keyed request over it is 429
// too-many-keyed-requests naming the key, with Retry-After; a retry whose
// first answer is stored is always answered from it.

// keyedLimiterKey is the producer's keyed quota's name beside its ingress
// quota (the same limiter, so shared through Redis like it).
func keyedLimiterKey(p *Producer) string { return "keyed\x00" + p.Name }

// admitKeyed charges one keyed request to p's quota.
func (s *Server) admitKeyed(ctx context.Context, p *Producer) error {
	if s.Admit == nil || s.Admit.Ingress == nil || p.Keyed.Burst < 1 {
		return nil
	}
	d, err := s.Admit.Ingress.Allow(ctx, keyedLimiterKey(p), p.Keyed, 1)
	if err != nil {
		return fmt.Errorf("keyed-request limiter: %w", err)
	}
	if d.Allowed {
		return nil
	}
	return &apiError{Kind: kindTooManyKeyed, RetryAfter: max(d.RetryAfter, time.Second),
		Detail: fmt.Sprintf("producer %s may make %d requests with an Idempotency-Key a day (producers[].max_keyed_per_day); retry after the Retry-After seconds, or send without one",
			p.Name, p.Keyed.Burst),
		Fields: []fieldProblem{{Field: "Idempotency-Key", Reason: "over producers[].max_keyed_per_day"}}}
}
