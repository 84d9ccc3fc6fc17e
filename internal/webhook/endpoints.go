package webhook

import (
	"sync"
	"time"
)

// maxEndpoints bounds the endpoints tracked at once; idle ones (nothing in
// flight, breaker closed) are forgotten first.
const maxEndpoints = 1024

// endpoint is one destination's concurrency and breaker.
type endpoint struct {
	name      string
	inflight  int
	failures  int       // consecutive
	openUntil time.Time // breaker open before this
	probing   bool      // half-open: one trial in flight
	// attempt is a moving average of this endpoint's attempts' durations;
	// booked is when the events deferred while it was busy are due back,
	// the last of them: each is booked attempt/limit after the one before,
	// so a backlog comes back at the pace the endpoint takes it instead
	// of every 200 ms all at once (which had every claim cycle through it
	// before reaching another producer's events).
	attempt   time.Duration
	booked    time.Time
	busySince time.Time // when its oldest delivery in flight began, the estimate before any attempt ended
}

// Bounds of a busy endpoint's deferral: at least minBusyWait (an event
// claimed again sooner would find it busy still), at most maxBusyWait.
const (
	minBusyWait = 200 * time.Millisecond
	maxBusyWait = 15 * time.Minute
)

// endpoints tracks every endpoint; safe for concurrent use.
type endpoints struct {
	mu        sync.Mutex
	m         map[string]*endpoint
	limit     int
	threshold int
	open      time.Duration
}

func newEndpoints(limit, threshold int, open time.Duration) *endpoints {
	return &endpoints{m: map[string]*endpoint{}, limit: limit, threshold: threshold, open: open}
}

// Reasons a delivery waits (the reason label of
// smsgw_callbacks_deferred_total).
const (
	deferBusy    = "busy"    // the endpoint has PerEndpoint deliveries in flight
	deferBreaker = "breaker" // the endpoint's breaker is open
)

// held is one delivery's in-flight slot of an endpoint; trial marks the
// half-open breaker's one trial, whose end alone lets another start.
type held struct {
	e     *endpoint
	trial bool
}

// acquire takes an in-flight slot of endpoint name, or says how long to
// wait and why.
func (s *endpoints) acquire(name string, now time.Time) (*held, time.Duration, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[name]
	if e == nil {
		if len(s.m) >= maxEndpoints {
			s.evictIdle(now)
		}
		e = &endpoint{name: name}
		s.m[name] = e
	}
	trial := false
	switch {
	case now.Before(e.openUntil):
		return nil, e.openUntil.Sub(now), deferBreaker
	case e.failures >= s.threshold:
		// Half-open: one trial at a time until one succeeds.
		if e.probing {
			return nil, s.open / 4, deferBreaker
		}
		e.probing, trial = true, true
	case e.inflight >= s.limit:
		if e.booked.Before(now) {
			e.booked = now
		}
		est := e.attempt
		if est == 0 { // none ended yet: they take at least as long as they have been running
			est = now.Sub(e.busySince)
		}
		e.booked = e.booked.Add(max(est, 10*time.Millisecond) / time.Duration(s.limit))
		return nil, min(max(e.booked.Sub(now), minBusyWait), maxBusyWait), deferBusy
	}
	if e.inflight == 0 {
		e.busySince = now
	}
	e.inflight++
	return &held{e: e, trial: trial}, 0, ""
}

// release ends a delivery that took took: an answer closes the breaker,
// no answer counts towards opening it (and reopens a half-open one). Only
// the trial's end lets another trial start: a delivery begun before the
// breaker opened that ends during the trial must not (a second trial
// would run beside the first when an attempt outlasts the open time).
func (s *endpoints) release(h *held, ok bool, now time.Time, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := h.e
	e.inflight--
	if h.trial {
		e.probing = false
	}
	if e.attempt == 0 {
		e.attempt = took
	} else {
		e.attempt += (took - e.attempt) / 8
	}
	if ok {
		e.failures = 0
		e.openUntil = time.Time{}
		return
	}
	e.failures++
	if e.failures >= s.threshold {
		e.openUntil = now.Add(s.open)
	}
}

func (s *endpoints) evictIdle(now time.Time) {
	for k, e := range s.m {
		if e.inflight == 0 && !now.Before(e.openUntil) && e.failures < s.threshold {
			delete(s.m, k)
		}
	}
	if len(s.m) >= maxEndpoints {
		// Everything is busy or broken: forget broken ones too rather than
		// grow; a forgotten breaker only means one more trial.
		for k, e := range s.m {
			if e.inflight == 0 {
				delete(s.m, k)
			}
		}
	}
}
