package dispatch

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// TestSenderThrottlePausesOnlyItsSender: a throttle of the sender's scope
// pauses that sender alone, on the shared limiter, for its Retry-After: the
// other sender's messages of the same class go on meanwhile, the throttled
// sender is asked once, the account is not paused and the suspension
// guard's count (the account's 429s) stays at zero. Its messages go once
// the pause ends, none lost.
func TestSenderThrottlePausesOnlyItsSender(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	q := acct.queue(t, nil)
	lim := acct.limiter(t, nil, defaultLimits)
	const pause = 4 * time.Second
	var mu sync.Mutex
	calls := map[string][]time.Time{}
	throttled := false
	p := funcProvider(func(_ context.Context, req *provider.Request) (provider.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		calls[req.From] = append(calls[req.From], time.Now())
		if req.From == "Mkt3" && !throttled {
			throttled = true
			return provider.Result{}, &provider.Error{Reason: provider.ReasonThrottled, Temporary: true, RetryAfter: pause,
				Status: 429, Message: "sender rate limit exceeded", Scope: provider.ScopeSender}
		}
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	})
	var slow, fast []*sms.Message
	var ids []string
	for i := range 25 {
		m := newMsg(sms.ClassTransactional)
		if i < 5 {
			m.From = "Mkt3"
			slow = append(slow, m)
		} else {
			m.From = "Mkt2"
			fast = append(fast, m)
		}
		ids = append(ids, m.ID)
	}
	enqueue(t, q, slow...) // ahead in line
	enqueue(t, q, fast...)
	start := time.Now()
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: lim, Provider: p, Pacing: defaultLimits})
	var fastIDs []string
	for _, m := range fast {
		fastIDs = append(fastIDs, m.ID)
	}
	waitTerminal(t, q, fastIDs...)
	mu.Lock()
	asked := len(calls["Mkt3"])
	mu.Unlock()
	if asked != 1 {
		t.Errorf("the other sender's 20 took %s; Mkt3 asked %d times by then, want them all sent within its %s pause, Mkt3 asked once",
			time.Since(start), asked, pause)
	}
	if left := d.pauseLeft(); left > 0 {
		t.Errorf("the account is paused for %s after a sender's throttle", left)
	}
	if dec, err := lim.Reserve(context.Background(), limiter.Request{Class: "transactional", Cost: 1, Sender: "Mkt3", MaxWait: time.Second}); err != nil || !dec.SenderPaused {
		t.Errorf("the shared limiter on Mkt3 during its pause: %+v %v, want its pause", dec, err)
	}
	for id, m := range waitTerminal(t, q, ids...) {
		if m.Status != sms.StatusSent {
			t.Errorf("%s ended %s", id, m.Status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := len(calls["Mkt3"]); n != len(slow)+1 {
		t.Errorf("Mkt3 asked %d times, want once throttled and once for each of its %d messages", n, len(slow))
	}
	if second := calls["Mkt3"][1]; second.Sub(calls["Mkt3"][0]) < pause-100*time.Millisecond {
		t.Errorf("Mkt3 asked again %s after its throttle, within its %s pause", second.Sub(calls["Mkt3"][0]), pause)
	}
	if got := value(d.m.throttles); got != 0 {
		t.Errorf("the account's throttle count (the suspension guard's) is %v after a sender's 429", got)
	}
	if got := value(d.sm.pauses.WithLabelValues(senderOther, string(provider.ReasonThrottled))); got != 1 {
		t.Errorf("sender pauses of other senders: %v, want 1", got)
	}
}

// TestSenderLimitDoesNotHoldTheLane: a backlog from a sender at 1/s, ahead
// in line, goes back due at the sender's slots without holding the lane:
// another sender's messages of the same class are all sent before the
// backlog (4 s at least), and the slow sender's sends keep its rate.
func TestSenderLimitDoesNotHoldTheLane(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	q := acct.queue(t, nil)
	cfg := defaultLimits
	cfg.Senders = map[string]limiter.Rate{"Slow": {PerSecond: 1, Burst: 1}}
	lim := acct.limiter(t, nil, cfg)
	var mu sync.Mutex
	sent := map[string][]time.Time{}
	p := funcProvider(func(_ context.Context, req *provider.Request) (provider.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		sent[req.From] = append(sent[req.From], time.Now())
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	})
	var slow, other []*sms.Message
	var otherIDs, ids []string
	for range 5 {
		m := newMsg(sms.ClassMarketing)
		m.From = "Slow"
		slow = append(slow, m)
		ids = append(ids, m.ID)
	}
	for range 40 {
		m := newMsg(sms.ClassMarketing)
		m.From = "Other"
		other = append(other, m)
		otherIDs = append(otherIDs, m.ID)
	}
	enqueue(t, q, slow...)
	enqueue(t, q, other...)
	start := time.Now()
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: lim, Provider: p, Pacing: cfg})
	waitTerminal(t, q, otherIDs...)
	otherDone := time.Since(start)
	mu.Lock()
	slowThen := len(sent["Slow"])
	mu.Unlock()
	waitTerminal(t, q, append(ids, otherIDs...)...)
	if slowThen >= len(slow) {
		t.Errorf("the other sender's 40 took %s and the slow sender had sent %d of %d then: the backlog held the lane",
			otherDone, slowThen, len(slow))
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(sent["Slow"]); i++ {
		if gap := sent["Slow"][i].Sub(sent["Slow"][i-1]); gap < 950*time.Millisecond {
			t.Errorf("slow sender's sends %d and %d %s apart, under its 1 s interval", i-1, i, gap)
		}
	}
	if got := value(d.sm.waits.WithLabelValues("Slow", requeueSenderLimit)); got < 1 {
		t.Errorf("messages put back for the slow sender's limit: %v", got)
	}
}

// TestSenderLimitedOTPWaitsWithinItsDeadline: OTPs that arrive together
// from a sender with a limit of its own are each sent at the sender's
// next slot within their deadline, not refused because the sender's key
// never books ahead.
func TestSenderLimitedOTPWaitsWithinItsDeadline(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	cfg := defaultLimits
	cfg.Senders = map[string]limiter.Rate{"Auth": {PerSecond: 20, Burst: 1}}
	var mu sync.Mutex
	var at []time.Time
	d := newSendNow(t, acct, acct.limiter(t, nil, cfg), funcProvider(func(_ context.Context, req *provider.Request) (provider.Result, error) {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	}))
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for range 5 {
		wg.Go(func() {
			m := newMsg(sms.ClassOTP)
			m.From = "Auth"
			if _, err := d.SendNow(context.Background(), m, time.Second); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("an OTP from a limited sender refused: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	if len(at) == 5 && at[4].Sub(at[0]) < 180*time.Millisecond {
		t.Errorf("5 OTPs from a 20/s sender sent within %s, under 4 intervals", at[4].Sub(at[0]))
	}
}
