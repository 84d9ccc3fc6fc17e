package dispatch

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// TestSnapshotCountsOutcomes drives messages to every outcome through a real
// Redis queue and limiter, and the fast path both ways, then compares the
// Snapshot with what happened.
func TestSnapshotCountsOutcomes(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	q := acct.queue(t, nil)
	guard := localGuard(t, GuardConfig{Threshold: 10})
	var mu sync.Mutex
	throttledOnce := map[string]bool{}
	p := funcProvider(func(ctx context.Context, req *provider.Request) (provider.Result, error) {
		switch {
		case strings.HasPrefix(req.Body, "reject"):
			return provider.Result{}, rejectedErr()
		case strings.HasPrefix(req.Body, "down"):
			return provider.Result{}, unavailableErr()
		case strings.HasPrefix(req.Body, "throttle"):
			mu.Lock()
			defer mu.Unlock()
			if !throttledOnce[req.ID] {
				throttledOnce[req.ID] = true
				return provider.Result{}, &provider.Error{Reason: provider.ReasonThrottled, Temporary: true, RetryAfter: 100 * time.Millisecond, Status: 429}
			}
		}
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	})
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: p, Guard: guard,
		MaxAttempts: 1, BackoffBase: time.Millisecond})
	if got := d.Snapshot(); got.Classes[sms.ClassMarketing] != (ClassCounts{}) || got.Throttled != 0 || got.GuardActivateAt != 5 {
		t.Fatalf("fresh snapshot %+v, want zeros and activate_at 5", got)
	}

	mk := func(c sms.Class, body string) *sms.Message {
		m := newMsg(c)
		m.Body = body + " " + m.Body
		return m
	}
	expired := mk(sms.ClassMarketing, "ok")
	expired.ExpiresAt = time.Now().Add(-time.Second)
	ms := []*sms.Message{
		mk(sms.ClassTransactional, "ok"), mk(sms.ClassTransactional, "ok"), mk(sms.ClassTransactional, "reject"),
		mk(sms.ClassMarketing, "down"), mk(sms.ClassMarketing, "throttle"), expired, mk(sms.ClassOTP, "ok"),
	}
	enqueue(t, q, ms...)
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	waitTerminal(t, q, ids...)

	if _, err := d.SendNow(t.Context(), mk(sms.ClassOTP, "ok"), time.Second); err != nil {
		t.Fatalf("SendNow: %v", err)
	}
	if _, err := d.SendNow(t.Context(), mk(sms.ClassOTP, "down"), time.Second); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("SendNow to a provider answering 5xx: %v, want ErrOutcomeUnknown", err)
	}

	// Acks are counted after the queue answered; wait for the last one.
	waitUntil(t, "every outcome counted", func() bool {
		s := d.Snapshot()
		return s.Classes[sms.ClassMarketing].Sent+s.Classes[sms.ClassMarketing].Dead+s.Classes[sms.ClassMarketing].Expired == 3
	})
	got := d.Snapshot()
	want := map[sms.Class]ClassCounts{
		sms.ClassOTP:           {Sent: 2},
		sms.ClassTransactional: {Sent: 2, Failed: 1},
		sms.ClassMarketing:     {Sent: 1, Expired: 1, Dead: 1},
	}
	for c, w := range want {
		if got.Classes[c] != w {
			t.Errorf("class %s: %+v, want %+v", c, got.Classes[c], w)
		}
	}
	if got.Throttled != 1 || got.GuardCount != 1 || got.GuardActive {
		t.Errorf("throttled=%d guard_count=%d active=%v, want 1, 1, false", got.Throttled, got.GuardCount, got.GuardActive)
	}
	if got.SendNow.Sent != 1 || got.SendNow.Unknown != 1 || got.SendNow.Refused() != 1 {
		t.Errorf("send now %+v, want 1 sent and 1 unknown (a 5xx)", got.SendNow)
	}
}

// Each Mark adds the time since the previous mark to its step; a step
// marked twice accumulates; a nil Steps ignores marks.
func TestStepsMark(t *testing.T) {
	s := NewSteps(time.Now().Add(-3 * time.Millisecond))
	s.Mark(StepDecode) // ≥ 3 ms since the start
	s.Mark(StepReserve)
	time.Sleep(2 * time.Millisecond)
	s.Mark(StepDecode) // + ≥ 2 ms
	if d := s.Duration(StepDecode); d < 5*time.Millisecond {
		t.Errorf("decode %s, want >= 5ms (two marks)", d)
	}
	if d := s.Duration(StepReserve); d >= 2*time.Millisecond {
		t.Errorf("reserve %s, want the short gap only", d)
	}
	if s.Duration(StepProvider) != 0 || s.Duration(NumSteps) != 0 {
		t.Errorf("unmarked steps have time: %s", s.ServerTiming())
	}
	st := s.ServerTiming()
	if !strings.HasPrefix(st, "decode;dur=") || strings.Count(st, ";dur=") != int(NumSteps) || !strings.HasSuffix(st, "provider;dur=0") {
		t.Errorf("Server-Timing %q", st)
	}
	var none *Steps
	none.Mark(StepDecode)
	if none.Duration(StepDecode) != 0 || none.ServerTiming() != "" {
		t.Error("nil Steps recorded something")
	}
	if stepsFrom(WithSteps(context.Background(), s)) != s || stepsFrom(context.Background()) != nil {
		t.Error("context does not carry the steps")
	}
}
