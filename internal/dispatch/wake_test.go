package dispatch

import (
	"context"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// An idle replica takes a message another process enqueued when the queue
// announces it, not at its next poll: with polls of an hour the message
// still goes. (Before the wake-up listener it waited for the poll.)
func TestIdleReplicaWokenByAnotherProcessEnqueue(t *testing.T) {
	acct := newAccount(t)
	sent := make(chan string, 4)
	p := funcProvider(func(_ context.Context, req *provider.Request) (provider.Result, error) {
		sent <- req.ID
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	})
	d, _ := newDispatcher(t, Config{Queue: acct.queue(t, nil), Limiter: acct.limiter(t, nil, defaultLimits), Provider: p,
		OTPWorkers: 1, OTPPoll: time.Hour, BulkPoll: time.Hour})
	other := acct.queue(t, nil) // another process: it never calls d.Notify
	// Both lanes took twice and found nothing: once at start, once on
	// the wake-up every class gets when the listener subscribes. They
	// sleep now until a wake-up (or the hour's poll).
	waitUntil(t, "both lanes idle", func() bool {
		return value(d.m.takes.WithLabelValues(laneOTP, takeEmpty)) >= 2 && value(d.m.takes.WithLabelValues(laneBulk, takeEmpty)) >= 2
	})
	for _, c := range []sms.Class{sms.ClassOTP, sms.ClassMarketing} {
		m := newMsg(c)
		enqueue(t, other, m)
		select {
		case id := <-sent:
			if id != m.ID {
				t.Fatalf("sent %s, want %s", id, m.ID)
			}
		case <-time.After(patience):
			t.Fatalf("%s message enqueued elsewhere not sent within %s: the idle replica was not woken", c, patience)
		}
	}
}

// A message this process hands back because it stops wakes an idle
// replica at once: the other replica, polling only hourly, sends it.
// (Before, it waited for the other's poll.)
func TestStopHandsBackToIdleReplica(t *testing.T) {
	acct := newAccount(t)
	holding := make(chan string, 1)
	stuck := funcProvider(func(ctx context.Context, req *provider.Request) (provider.Result, error) {
		holding <- req.ID
		<-ctx.Done() // the stop cuts this send short
		return provider.Result{}, ctx.Err()
	})
	a, _ := newDispatcher(t, Config{Queue: acct.queue(t, nil), Limiter: acct.limiter(t, nil, defaultLimits), Provider: stuck,
		OTPWorkers: 1, OTPPoll: time.Hour, BulkPoll: time.Hour})
	m := newMsg(sms.ClassTransactional)
	enqueue(t, acct.queue(t, nil), m)
	select {
	case <-holding:
	case <-time.After(patience):
		t.Fatal("the first replica never called the provider")
	}
	sent := make(chan string, 1)
	b, _ := newDispatcher(t, Config{Queue: acct.queue(t, nil), Limiter: acct.limiter(t, nil, defaultLimits),
		Provider: funcProvider(func(_ context.Context, req *provider.Request) (provider.Result, error) {
			sent <- req.ID
			return provider.Result{ProviderID: "p-" + req.ID}, nil
		}),
		OTPWorkers: 1, OTPPoll: time.Hour, BulkPoll: time.Hour})
	waitUntil(t, "the second replica idle", func() bool {
		return value(b.m.takes.WithLabelValues(laneBulk, takeEmpty)) >= 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := a.Stop(ctx); err == nil {
		t.Fatal("Stop did not cut the send short")
	}
	select {
	case id := <-sent:
		if id != m.ID {
			t.Fatalf("sent %s, want %s", id, m.ID)
		}
	case <-time.After(patience):
		t.Fatal("the message handed back at stop was not sent by the idle replica: nobody was woken")
	}
}

// TakesHere: true while a lane serving the class found its queue empty and
// waits (the API then wakes it and no other replica), false once the
// dispatcher stopped.
func TestTakesHere(t *testing.T) {
	acct := newAccount(t)
	d, _ := newDispatcher(t, Config{Queue: acct.queue(t, nil), Limiter: acct.limiter(t, nil, defaultLimits),
		Provider: funcProvider(func(_ context.Context, req *provider.Request) (provider.Result, error) {
			return provider.Result{ProviderID: "p-" + req.ID}, nil
		}),
		OTPWorkers: 1, OTPPoll: time.Hour, BulkPoll: time.Hour})
	waitUntil(t, "both lanes idle", func() bool { return d.TakesHere(sms.ClassOTP) && d.TakesHere(sms.ClassMarketing) })
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range sms.Classes {
		if d.TakesHere(c) {
			t.Errorf("a stopped dispatcher says it takes %s", c)
		}
	}
}
