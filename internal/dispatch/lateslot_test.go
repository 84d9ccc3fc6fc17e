package dispatch

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"smsgw/internal/limiter"
	"smsgw/internal/provider/sim"
	"smsgw/internal/sms"
)

// slowAnswers is a limiter whose grants arrive late while stall is set:
// as when this process is starved between asking for a slot and sending.
type slowAnswers struct {
	limiter.Limiter
	stall atomic.Int64 // ns each grant is held back
}

func (s *slowAnswers) Reserve(ctx context.Context, req limiter.Request) (limiter.Decision, error) {
	d, err := s.Limiter.Reserve(ctx, req)
	if n := s.stall.Load(); n > 0 {
		time.Sleep(time.Duration(n))
	}
	return d, err
}

// TestLateSlotForfeited: a grant that arrives later than LateSlot after it
// was asked for is not used (the slot may have been at the ask); the
// message goes back without spending an attempt and is sent once grants
// come in time. The fast path reserves once more, then answers no slot.
func TestLateSlotForfeited(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	s, p, _ := startSim(t, sim.Config{})
	lim := &slowAnswers{Limiter: acct.limiter(t, nil, limiter.Config{Global: limiter.Rate{PerSecond: 1000, Burst: 5}})}
	lim.stall.Store(int64(80 * time.Millisecond))
	q := acct.queue(t, nil)
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: lim, Provider: p, LateSlot: 30 * time.Millisecond})

	_, err := d.SendNow(context.Background(), newMsg(sms.ClassOTP), time.Second)
	var noSlot NoSlotError
	if !errors.As(err, &noSlot) {
		t.Fatalf("fast path with late grants: %v, want NoSlotError", err)
	}

	m := newMsg(sms.ClassTransactional)
	enqueue(t, q, m)
	d.Notify(sms.ClassTransactional)
	late := d.m.lateSlots.WithLabelValues("transactional")
	waitUntil(t, "a queued message's late slot to be forfeited", func() bool { return value(late) >= 3 })
	if v := value(d.m.lateSlots.WithLabelValues("otp")); v != 2 {
		t.Errorf("fast path: %v late slots, want 2 (a second reservation)", v)
	}
	if n := len(s.Accepted()); n != 0 {
		t.Fatalf("the provider got %d sends from late slots", n)
	}
	lim.stall.Store(0)
	got := waitTerminal(t, q, m.ID)[m.ID]
	if got.Status != sms.StatusSent || got.Attempts != 1 {
		t.Errorf("after the stall: status %s, attempts %d; want sent at the first attempt", got.Status, got.Attempts)
	}
	if _, err := d.SendNow(context.Background(), newMsg(sms.ClassOTP), time.Second); err != nil {
		t.Errorf("fast path once grants are in time: %v", err)
	}
}

// TestLateSlotFor: the bound is the contract's margin in time at the
// target rate (100/s contract, 90/s target, burst 5: 5 units, 55.5 ms),
// never below MinLateSlot.
func TestLateSlotFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		contract, target float64
		burst            int
		want             time.Duration
	}{
		{100, 90, 5, 55_555_555},
		{100, 50, 10, 800 * time.Millisecond},
		{100, 95, 5, MinLateSlot},
		{100, 0, 5, MinLateSlot},
	} {
		if got := LateSlotFor(tc.contract, tc.target, tc.burst); got != tc.want {
			t.Errorf("LateSlotFor(%g, %g, %d) = %v, want %v", tc.contract, tc.target, tc.burst, got, tc.want)
		}
	}
}
