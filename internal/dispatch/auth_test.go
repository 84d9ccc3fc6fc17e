package dispatch

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// A provider that refuses the account's credentials must not turn the queue
// into failures: the message goes back without spending an attempt and every
// replica pauses, so nothing is sent (or lost) until the credentials work.
func TestAuthFailurePausesEveryoneAndKeepsTheMessage(t *testing.T) {
	t.Parallel()
	a := newAccount(t)
	q := a.queue(t, nil)
	lim := a.limiter(t, nil, limiterConfig(100, 5))
	var calls atomic.Int64
	prov := funcProvider(func(ctx context.Context, req *provider.Request) (provider.Result, error) {
		calls.Add(1)
		return provider.Result{}, &provider.Error{Reason: provider.ReasonAuth, Status: 401, Message: "bad credentials"}
	})
	m1, m2 := newMsg(sms.ClassTransactional), newMsg(sms.ClassTransactional)
	enqueue(t, q, m1, m2)
	newDispatcher(t, Config{Queue: q, Limiter: lim, Provider: prov, Workers: 2, Lease: 5 * time.Second, MaxAttempts: 3,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})

	waitUntil(t, "the first send", func() bool { return calls.Load() >= 1 })
	time.Sleep(500 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Errorf("provider called %d times after refusing our credentials; want 1 (everyone paused)", n)
	}
	st, err := lim.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.PauseRemaining < AuthPause-5*time.Second {
		t.Errorf("shared pause %s, want about %s", st.PauseRemaining, AuthPause)
	}
	for _, m := range []*sms.Message{m1, m2} {
		got, err := q.Get(context.Background(), m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != sms.StatusQueued || got.Attempts != 0 || got.Dead {
			t.Errorf("message %s: status %s attempts %d dead %v; want queued, 0 attempts spent", m.ID, got.Status, got.Attempts, got.Dead)
		}
	}
}
