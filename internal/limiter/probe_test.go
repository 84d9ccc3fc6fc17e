package limiter

import (
	"context"
	"testing"
	"time"

	"smsgw/internal/redistest"
)

// TestProbeLeavesFallback: Probe, with no decision in between, brings a
// limiter in fallback back to Redis once Redis answers (the breaker lets
// one call through a second), and sends Redis nothing while Redis decides.
// Both shared limiters: the send schedule and the ingress quotas.
func TestProbeLeavesFallback(t *testing.T) {
	t.Parallel()
	type subject struct {
		srv    *redistest.Server
		decide func() error // one decision
		probe  func(context.Context)
		mode   func() Mode
		calls  func() int64 // Redis commands sent
	}
	for name, build := range map[string]func(t *testing.T) subject{
		"send": func(t *testing.T) subject {
			srv := redistest.StartServer(t, redistest.ServerOptions{})
			f := newShared(t, srv, redistest.Prefix(t), Config{Global: Rate{PerSecond: 100, Burst: 5}}, 2)
			rt := &redistest.RoundTrips{}
			f.client.AddHook(rt)
			return subject{srv: srv, probe: f.shared.Probe, mode: f.shared.Mode, calls: rt.N,
				decide: func() error { _, err := f.shared.Reserve(bg, Request{Cost: 1}); return err }}
		},
		"ingress": func(t *testing.T) subject {
			f := newSharedKeysFixture(t)
			rt := &redistest.RoundTrips{}
			f.s.redis.client.AddHook(rt)
			return subject{srv: f.srv, probe: f.s.Probe, mode: f.s.Mode, calls: rt.N,
				decide: func() error { _, err := f.s.Allow(bg, "p", Rate{PerSecond: 100, Burst: 5}, 1); return err }}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := build(t)
			if err := s.decide(); err != nil || s.mode() != ModeShared {
				t.Fatalf("with Redis up: %v, mode %s", err, s.mode())
			}
			before := s.calls()
			for range 5 {
				s.probe(bg)
			}
			if n := s.calls() - before; n != 0 {
				t.Errorf("5 probes while Redis decides sent %d Redis commands, want 0", n)
			}
			s.srv.Kill()
			if err := s.decide(); err != nil || s.mode() != ModeFallback {
				t.Fatalf("with Redis down: %v, mode %s", err, s.mode())
			}
			s.srv.Start()
			back := time.Now()
			// A patience, not a latency: the breaker lets a probe through
			// once a second. Without Probe reaching Redis the mode never
			// changes here, since nothing decides.
			for s.mode() != ModeShared {
				if time.Since(back) > 5*time.Second {
					t.Fatalf("still %s %s after Redis came back, with probes and no decision", s.mode(), time.Since(back))
				}
				s.probe(bg)
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
