package webhook

import (
	"testing"
	"time"
)

// TestBusyEndpointSpreadsItsBacklog: events deferred while an endpoint is
// busy are booked back one attempt/limit apart (the pace it takes them),
// not all 200 ms later, when they would be claimed and deferred again
// before any other producer's event is reached. Before any attempt ended,
// the attempts in flight count as long as they have been running.
func TestBusyEndpointSpreadsItsBacklog(t *testing.T) {
	s := newEndpoints(2, 5, time.Minute)
	t0 := time.Unix(1_700_000_000, 0)
	a, _, _ := s.acquire("https://slow.example", t0)
	b, _, _ := s.acquire("https://slow.example", t0)
	if a == nil || b == nil {
		t.Fatal("two slots of a limit of 2 refused")
	}
	// None ended yet, running for 4 s: booked 2 s apart (4 s / 2 slots).
	now := t0.Add(4 * time.Second)
	for i := 1; i <= 3; i++ {
		e, wait, why := s.acquire("https://slow.example", now)
		if e != nil || why != deferBusy || wait != time.Duration(i)*2*time.Second {
			t.Fatalf("deferral %d before any attempt ended: %v, %s, %q; want busy for %ds", i, e != nil, wait, why, 2*i)
		}
	}
	// Attempts of 1 s ended: half a second apart from the last booked.
	s.release(a, true, now, time.Second)
	s.release(b, true, now, time.Second)
	for _, took := range []time.Duration{time.Second, time.Second} {
		e, _, _ := s.acquire("https://slow.example", now)
		if e == nil {
			t.Fatal("a free slot refused")
		}
		defer s.release(e, true, now, took)
	}
	_, wait, _ := s.acquire("https://slow.example", now)
	if want := 6*time.Second + 500*time.Millisecond; wait != want {
		t.Fatalf("deferral after 1 s attempts: %s, want %s", wait, want)
	}
	// Much later the booking restarts from then: one step ahead.
	later := now.Add(time.Hour)
	if _, wait, _ := s.acquire("https://slow.example", later); wait != 500*time.Millisecond {
		t.Fatalf("deferral an hour later: %s, want 500ms", wait)
	}
	// Never more than maxBusyWait.
	for range 10_000 {
		if _, wait, _ := s.acquire("https://slow.example", later); wait > maxBusyWait {
			t.Fatalf("deferral of %s, over %s", wait, maxBusyWait)
		}
	}
}

// TestOneTrialAtATime: a half-open breaker lets one trial through. A
// delivery begun before the breaker opened that fails during the trial
// reopens it, but must not let a second trial start beside the first once
// the open time passes (an attempt may outlast it); the trial's own end
// does.
func TestOneTrialAtATime(t *testing.T) {
	const ep = "https://flaky.example"
	s := newEndpoints(4, 1, time.Second)
	t0 := time.Unix(1_700_000_000, 0)
	a, _, _ := s.acquire(ep, t0)
	straggler, _, _ := s.acquire(ep, t0)
	s.release(a, false, t0, time.Second) // open until t0+1s
	trial, _, why := s.acquire(ep, t0.Add(2*time.Second))
	if trial == nil {
		t.Fatalf("no trial after the open time: %q", why)
	}
	if h, _, _ := s.acquire(ep, t0.Add(2*time.Second)); h != nil {
		t.Fatal("a second delivery beside the trial")
	}
	s.release(straggler, false, t0.Add(2*time.Second), 2*time.Second) // open again until t0+3s
	if h, _, why := s.acquire(ep, t0.Add(4*time.Second)); h != nil || why != deferBreaker {
		t.Fatalf("a second trial while the first runs: %v, %q", h != nil, why)
	}
	s.release(trial, true, t0.Add(4*time.Second), 2*time.Second) // the endpoint answered: closed
	if h, _, why := s.acquire(ep, t0.Add(4*time.Second)); h == nil {
		t.Fatalf("closed breaker refused: %q", why)
	}
}
