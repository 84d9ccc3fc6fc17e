package dispatch

import (
	"context"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// The provider is told what is left of a queued message's TTL, on the
// dispatcher's clock, so a vendor drops what it could only deliver late;
// a message without a TTL, and the fast path, give no limit.
func TestProviderGetsTheRemainingTTL(t *testing.T) {
	t.Parallel()
	clock := time.Now()
	got := make(chan time.Duration, 4)
	prov := funcProvider(func(ctx context.Context, req *provider.Request) (provider.Result, error) {
		got <- req.Validity
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	})
	a := newAccount(t)
	q := a.queue(t, nil)
	m := newMsg(sms.ClassTransactional)
	m.ExpiresAt = clock.Add(10 * time.Minute)
	enqueue(t, q, m)
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: a.limiter(t, nil, defaultLimits), Provider: prov,
		Now: func() time.Time { return clock }})
	// The store keeps times to the millisecond.
	if v := <-got; v < 10*time.Minute-time.Millisecond || v > 10*time.Minute {
		t.Errorf("queued with a TTL: validity %v, want 10m (what is left of it)", v)
	}
	enqueue(t, q, newMsg(sms.ClassTransactional))
	if v := <-got; v != 0 {
		t.Errorf("queued without a TTL: validity %v, want none", v)
	}
	otp := newMsg(sms.ClassOTP)
	otp.ExpiresAt = clock.Add(time.Second)
	if _, err := d.SendNow(context.Background(), otp, time.Second); err != nil {
		t.Fatal(err)
	}
	if v := <-got; v != 0 {
		t.Errorf("fast path: validity %v, want none (its deadline bounds our attempt only)", v)
	}
}
