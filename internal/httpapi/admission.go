package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"smsgw/internal/admission"
	"smsgw/internal/limiter"
)

// Admission runs in admission.Order (internal/admission/pipeline.go); the
// bearer key and the class are checked before it (router, handlers). What
// is left here is HTTP: the RateLimit headers of the ingress GCRA's
// decision, and the body gate told of a refusal.
//
// max_outstanding is read and then enqueued on the in-process executor,
// not one atomic step: under concurrent requests a producer may overshoot
// it by the requests in flight. It bounds a backlog, not a rate, so that
// slack is harmless.

// setRateLimitHeaders writes the RateLimit-Limit/-Remaining/-Reset fields
// (draft-ietf-httpapi-ratelimit-headers, the widely deployed separate-field
// form): Limit is the burst, Remaining what could pass now, Reset the
// seconds until the full burst is back.
func setRateLimitHeaders(w http.ResponseWriter, r limiter.Rate, d limiter.KeyDecision) {
	reset := int64(0)
	if d.ResetAfter > 0 {
		reset = ceilSeconds(d.ResetAfter)
	}
	setHeaders(w.Header(), &rateLimitHeaders, strconv.Itoa(r.Burst), strconv.Itoa(max(0, d.Remaining)), strconv.FormatInt(reset, 10))
}

var rateLimitHeaders = [3]string{"Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset"} // canonical, as Header.Set stores them

// admitIngress is admission's ingress step for n messages (a batch's, an
// OTP's) with its headers: how many were granted (n, or fewer for a
// batch; at least 1).
func (s *Server) admitIngress(ctx context.Context, w http.ResponseWriter, p *Producer, n int) (int, error) {
	granted, d, err := s.Admit.Charge(ctx, p.asSender(), n)
	var rj *admission.Rejection
	if err == nil || errors.As(err, &rj) {
		setRateLimitHeaders(w, p.Ingress, d)
	}
	if rj != nil {
		s.Edge.BodyGate.refused(p, d, time.Now())
	}
	return granted, err
}
