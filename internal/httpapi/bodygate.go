package httpapi

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"smsgw/internal/admission"
	"smsgw/internal/limiter"
)

// BodyGate runs on the routes that charge a producer's ingress quota
// (POST /v1/messages, /v1/messages/batch, /v1/otp) after the key check and
// before the body is read, so that a hostile or broken producer cannot make
// the process hold more request bytes than the configuration allows:
//
//  1. a producer this replica saw refused by its ingress quota is refused
//     again, 429 with the same Retry-After, until one message would pass
//     (the quota's schedule only moves forward, so the time is still
//     right when other replicas share it);
//  2. the body's bytes (its Content-Length, or http.max_body_bytes when it
//     is sent chunked) are reserved against the producer's and the
//     process's bounds (http.body_bytes_in_flight_per_producer,
//     http.body_bytes_in_flight) until the answer is written; over either,
//     503 with Retry-After.
//
// Its maps are keyed by the configured producers' names: bounded by the
// configuration, not by requests.
type BodyGate struct {
	maxTotal, maxPer, maxBody int64

	mu       sync.Mutex
	total    int64
	inFlight map[string]int64
	until    map[string]time.Time // no unit of the producer's quota before
}

// NewBodyGate bounds bodies in flight to maxTotal bytes in the process and
// maxPer per producer; a chunked body counts as maxBody.
func NewBodyGate(maxTotal, maxPer, maxBody int64) *BodyGate {
	return &BodyGate{maxTotal: maxTotal, maxPer: maxPer, maxBody: maxBody,
		inFlight: map[string]int64{}, until: map[string]time.Time{}}
}

// bodyGateRetry is the Retry-After of a request refused for the bytes in
// flight: requests of a batch's size take well under it.
const bodyGateRetry = time.Second

// refused records an ingress decision that denied p: the next unit of p's
// quota is free ResetAfter minus (burst-1) intervals from now (the
// decision's own RetryAfter is for its whole cost, a batch's several
// units). A decision with a unit to spare records nothing.
func (g *BodyGate) refused(p *Producer, d limiter.KeyDecision, now time.Time) {
	interval := time.Duration(float64(time.Second) / p.Ingress.PerSecond)
	g.refusedFor(p, d.ResetAfter-time.Duration(p.Ingress.Burst-1)*interval, now)
}

// refusedFor records that no unit of p's quota is free for wait.
func (g *BodyGate) refusedFor(p *Producer, wait time.Duration, now time.Time) {
	if wait <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if u := now.Add(wait); u.After(g.until[p.Name]) {
		g.until[p.Name] = u
	}
}

// held is how long p's quota has no unit left, as far as this replica
// knows (0: none known).
func (g *BodyGate) held(p *Producer, now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	u, ok := g.until[p.Name]
	if !ok {
		return 0
	}
	if !u.After(now) {
		delete(g.until, p.Name)
		return 0
	}
	return u.Sub(now)
}

// reserve takes n bytes for p, or answers why it cannot; release gives
// them back (call it once).
func (g *BodyGate) reserve(p *Producer, n int64) (release func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.inFlight[p.Name]+n > g.maxPer:
		return nil, &apiError{Kind: kindUnavailable, RetryAfter: bodyGateRetry, Detail: fmt.Sprintf(
			"producer %s has %d request-body bytes being read or processed; at most %d (http.body_bytes_in_flight_per_producer): retry after the Retry-After seconds",
			p.Name, g.inFlight[p.Name], g.maxPer)}
	case g.total+n > g.maxTotal:
		return nil, &apiError{Kind: kindUnavailable, RetryAfter: bodyGateRetry, Detail: fmt.Sprintf(
			"the gateway has %d request-body bytes being read or processed; at most %d (http.body_bytes_in_flight): retry after the Retry-After seconds",
			g.total, g.maxTotal)}
	}
	g.inFlight[p.Name] += n
	g.total += n
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.total -= n
			if g.inFlight[p.Name] -= n; g.inFlight[p.Name] <= 0 {
				delete(g.inFlight, p.Name)
			}
		})
	}, nil
}

// gateBody is the BodyGate as middleware; it runs after authProducer.
func (s *Server) gateBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := producerFrom(r.Context())
		if wait := s.Edge.BodyGate.held(p, time.Now()); wait > 0 {
			refuseUnread(w)
			s.WriteError(w, r, admission.RateLimited(p.asSender(), wait))
			return
		}
		n := r.ContentLength
		if n < 0 {
			n = s.Edge.BodyGate.maxBody // chunked: as much as it may be
		}
		release, err := s.Edge.BodyGate.reserve(p, n)
		if err != nil {
			refuseUnread(w)
			s.WriteError(w, r, err)
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

// refuseUnread marks an answer given without reading the request's body:
// the connection closes after it. Otherwise net/http reads (and discards)
// up to 256 KB of the unread body before it sends the answer, which then
// waits for a slow or stalled body until http.read_timeout.
func refuseUnread(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
}

// InFlightOf is the bytes reserved for the producer named name.
func (g *BodyGate) InFlightOf(name string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight[name]
}
