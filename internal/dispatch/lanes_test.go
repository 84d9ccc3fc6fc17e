package dispatch

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/provider"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// TestOTPNotStarvedByMarketing: every bulk sender is stuck on a slow
// marketing send, and an OTP enqueued meanwhile still goes at once, on the
// senders reserved for OTP (the starvation of shared worker pools).
func TestOTPNotStarvedByMarketing(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	q := acct.queue(t, nil)
	release := make(chan struct{})
	defer close(release)
	bulkBusy := make(chan struct{}, 16)
	otpSent := make(chan time.Time, 1)
	p := funcProvider(func(ctx context.Context, req *provider.Request) (provider.Result, error) {
		if req.Class == sms.ClassOTP {
			otpSent <- time.Now()
			return provider.Result{ProviderID: "otp"}, nil
		}
		bulkBusy <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return provider.Result{ProviderID: "mkt"}, nil
	})
	enqueueN(t, q, 6, sms.ClassMarketing)
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: p,
		Workers: 2, OTPWorkers: 1, BulkBatch: 1})
	for range 2 {
		<-bulkBusy
	}
	otp := newMsg(sms.ClassOTP)
	enqueue(t, q, otp)
	start := time.Now()
	d.Notify(sms.ClassOTP)
	select {
	case at := <-otpSent:
		if took := at.Sub(start); took > 500*time.Millisecond {
			t.Errorf("OTP sent %s after enqueue while marketing held every bulk sender", took)
		}
	case <-time.After(patience):
		t.Fatal("OTP never sent while marketing held every bulk sender")
	}
}

// TestNotifyWakesLane: with a poll far longer than the test, a message is
// taken only because Notify woke its lane.
func TestNotifyWakesLane(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	q := acct.queue(t, nil)
	rec := newRecorder(funcProvider(func(context.Context, *provider.Request) (provider.Result, error) {
		return provider.Result{ProviderID: "ok"}, nil
	}))
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: rec,
		OTPWorkers: 1, OTPPoll: time.Hour, BulkPoll: time.Hour})
	time.Sleep(100 * time.Millisecond) // both lanes found the queue empty and idle for an hour
	for _, c := range []sms.Class{sms.ClassOTP, sms.ClassMarketing} {
		m := newMsg(c)
		enqueue(t, q, m)
		d.Notify(c)
		select {
		case id := <-rec.call:
			if id != m.ID {
				t.Errorf("sent %s, want %s", id, m.ID)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s message not taken 5 s after Notify", c)
		}
	}
}

// TestRetryNotHeldByThePoll: with a queue that announces ready messages
// (Redis), a lane with nothing to take idles for its poll, a backstop of
// seconds. A message its own send put back with a retry's backoff is not
// announced when it becomes ready; the lane must take it when its backoff
// ends, not when the poll does (here an hour: it would never be retried).
// An audit saw such retries wait the 5 s backstop with Redis, 0.25 s
// embedded. It fails when dueAt does not wake the lane.
func TestRetryNotHeldByThePoll(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	q := acct.queue(t, nil)
	if _, ok := q.(queue.Notifier); !ok {
		t.Fatal("the Redis queue is not a queue.Notifier; this test needs one")
	}
	var (
		calls atomic.Int32
		d     atomic.Pointer[Dispatcher]
	)
	p := funcProvider(func(_ context.Context, req *provider.Request) (provider.Result, error) {
		if calls.Add(1) == 1 {
			// Fail once the lane has found the queue empty and idles.
			for !d.Load().TakesHere(sms.ClassTransactional) {
				time.Sleep(time.Millisecond)
			}
			return provider.Result{}, &provider.Error{Reason: provider.ReasonUnavailable, Temporary: true, Status: 503, Message: "busy"}
		}
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	})
	disp, err := New(withRequired(Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: p, Owner: "t",
		Logger: testLogger(), Registerer: prometheus.NewRegistry(),
		BulkPoll: time.Hour, OTPPoll: time.Hour, BackoffBase: 100 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	d.Store(disp)
	if err := disp.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = disp.Stop(ctx)
	})
	m := newMsg(sms.ClassTransactional)
	enqueue(t, q, m)
	if got := waitTerminal(t, q, m.ID)[m.ID]; got.Status != sms.StatusSent || got.Attempts != 2 {
		t.Fatalf("message %s after %d attempts, want sent on the second", got.Status, got.Attempts)
	}
}
