package dispatch

import (
	"context"
	"sync"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// A marketing message accepted before the recipient's quiet hours began
// (20:59 in Tokyo) and taken after (21:01) waits for their end without
// spending an attempt or calling the provider; one whose TTL ends before
// the morning is expired at once; transactional is never held.
func TestQuietHoursHoldAtTake(t *testing.T) {
	t.Parallel()
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2025, 1, 15, 21, 1, 0, 0, tokyo)
	morning := time.Date(2025, 1, 16, 8, 0, 0, 0, tokyo)
	a := newAccount(t)
	q := a.queue(t, nil)
	var mu sync.Mutex
	var sent []string
	prov := funcProvider(func(ctx context.Context, req *provider.Request) (provider.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, req.ID)
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	})
	held, short, tx := newMsg(sms.ClassMarketing), newMsg(sms.ClassMarketing), newMsg(sms.ClassTransactional)
	short.ExpiresAt = clock.Add(time.Hour) // ends at 22:01, long before 08:00
	enqueue(t, q, held, short, tx)
	policy := sms.QuietPolicy{sms.ClassMarketing: {From: 21 * 60, To: 8 * 60}}
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: a.limiter(t, nil, defaultLimits), Provider: prov,
		Now: func() time.Time { return clock }, Hold: policy.Hold})

	got := waitTerminal(t, q, tx.ID, short.ID)
	if got[tx.ID].Status != sms.StatusSent {
		t.Errorf("transactional: %s, want sent (never held)", got[tx.ID].Status)
	}
	if m := got[short.ID]; m.Status != sms.StatusExpired || m.Attempts != 0 {
		t.Errorf("marketing whose TTL ends at night: %s after %d attempts, want expired without one", m.Status, m.Attempts)
	}
	var m *sms.Message
	waitUntil(t, "the held message put back", func() bool {
		m, err = q.Get(context.Background(), held.ID)
		return err == nil && m.Status == sms.StatusQueued && !m.NotBefore.IsZero()
	})
	// The queue runs on its own clock (Redis); the hold is the time left
	// until 08:00 on the dispatcher's.
	wait := morning.Sub(clock)
	if left := time.Until(m.NotBefore); left < wait-time.Minute || left > wait+time.Minute {
		t.Errorf("held until %s from now, want about %s (08:00 in Tokyo)", left, wait)
	}
	if m.Attempts != 0 || m.LastError != "" {
		t.Errorf("held message: attempts %d, last error %q; want none", m.Attempts, m.LastError)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range sent {
		if id != tx.ID {
			t.Errorf("the provider got %s during quiet hours", id)
		}
	}
	if n := value(d.m.requeues.WithLabelValues("marketing", requeueQuiet)); n != 1 {
		t.Errorf("quiet-hours requeues: %v, want 1", n)
	}
}
