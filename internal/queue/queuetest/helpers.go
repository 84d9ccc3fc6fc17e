package queuetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
)

// patience bounds every wait on the backend: generous, because the suite runs
// on loaded CI machines and a wrong answer fails long before it.
const patience = 20 * time.Second

// slack is the clock resolution a backend may round to (milliseconds).
const slack = 2 * time.Millisecond

// newMsg returns a valid message the way the gateway builds one.
func newMsg(producer string, c sms.Class) *sms.Message { return smstest.Message(producer, c) }

func opts(classes ...sms.Class) queue.TakeOptions {
	return queue.TakeOptions{Owner: "queuetest", Lease: time.Hour, Classes: classes}
}

func mustEnqueue(t *testing.T, q queue.Queue, ms ...*sms.Message) {
	t.Helper()
	for _, m := range ms {
		res, err := q.Enqueue(t.Context(), m)
		if err != nil {
			t.Fatalf("Enqueue %s: %v", m.ID, err)
		}
		if res.Existed {
			t.Fatalf("Enqueue %s: Existed for a new message", m.ID)
		}
	}
}

// enqueueTake enqueues a new message of producer "p" and class c and takes
// from c.
func enqueueTake(t *testing.T, q queue.Queue, c sms.Class) (*sms.Message, *queue.Leased) {
	t.Helper()
	m := newMsg("p", c)
	mustEnqueue(t, q, m)
	return m, mustTake(t, q, opts(c))
}

func mustTake(t *testing.T, q queue.Queue, o queue.TakeOptions) *queue.Leased {
	t.Helper()
	l, _, err := q.Take(t.Context(), o)
	if err != nil {
		t.Fatalf("Take(%v): %v", o.Classes, err)
	}
	if l == nil || l.Message == nil || l.Token == "" {
		t.Fatalf("Take(%v) = %+v: want a message and a token", o.Classes, l)
	}
	if l.Message.Status != sms.StatusSending {
		t.Fatalf("Take(%v): status %q, want sending", o.Classes, l.Message.Status)
	}
	return l
}

// mustEmpty asserts that nothing is ready and returns the wait Take gave.
func mustEmpty(t *testing.T, q queue.Queue, o queue.TakeOptions) time.Duration {
	t.Helper()
	l, wait, err := q.Take(t.Context(), o)
	if !errors.Is(err, queue.ErrEmpty) {
		id := ""
		if l != nil && l.Message != nil {
			id = l.Message.ID
		}
		t.Fatalf("Take(%v) = %q, %v: want ErrEmpty", o.Classes, id, err)
	}
	if wait < 0 {
		t.Fatalf("Take(%v): negative wait %v", o.Classes, wait)
	}
	return wait
}

func mustGet(t *testing.T, q queue.Queue, id string) *sms.Message {
	t.Helper()
	m, err := q.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get %s: %v", id, err)
	}
	return m
}

func wantStatus(t *testing.T, q queue.Queue, id string, s sms.Status) *sms.Message {
	t.Helper()
	m := mustGet(t, q, id)
	if m.Status != s {
		t.Fatalf("Get %s: status %q, want %q", id, m.Status, s)
	}
	return m
}

func wantLost(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("%s: %v, want ErrLeaseLost", what, err)
	}
}

// allLost asserts that every ack call with l fails with ErrLeaseLost.
func allLost(t *testing.T, q queue.Queue, l *queue.Leased) {
	t.Helper()
	ctx := t.Context()
	wantLost(t, "Extend", q.Extend(ctx, l, time.Hour))
	wantLost(t, "Complete", q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "stale", Attempts: 9}))
	wantLost(t, "Requeue", q.Requeue(ctx, l, queue.RequeueOptions{SpendAttempt: true, LastError: "stale"}))
	wantLost(t, "Dead", q.Dead(ctx, l, "stale", 9))
}

// recoverAll calls Recover until it has moved want leases in total; leases
// expire on the backend's clock, so this polls rather than sleeps a guess.
func recoverAll(t *testing.T, q queue.Queue, want int) {
	t.Helper()
	deadline := time.Now().Add(patience)
	got := 0
	for got < want {
		n, err := q.Recover(t.Context())
		if err != nil {
			t.Fatalf("Recover: %v", err)
		}
		got += n
		if got > want {
			t.Fatalf("Recover moved %d leases, want %d", got, want)
		}
		if got < want {
			if time.Now().After(deadline) {
				t.Fatalf("Recover moved %d leases within %v, want %d", got, patience, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// takeWhenDue takes from q, sleeping the waits Take's ErrEmpty returns, and
// fails if the message comes out before notBefore.
func takeWhenDue(t *testing.T, q queue.Queue, o queue.TakeOptions, notBefore time.Time) *queue.Leased {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		l, wait, err := q.Take(t.Context(), o)
		after := time.Now()
		switch {
		case err == nil:
			if after.Add(slack).Before(notBefore) {
				t.Fatalf("Take handed %s out at %v, %v before its not-before", l.Message.ID, after, notBefore.Sub(after))
			}
			return l
		case !errors.Is(err, queue.ErrEmpty):
			t.Fatalf("Take: %v", err)
		}
		if wait <= 0 {
			t.Fatalf("Take: ErrEmpty with wait %v while a message is scheduled at %v (now %v)", wait, notBefore, after)
		}
		if limit := notBefore.Sub(after) + time.Second; wait > limit {
			t.Fatalf("Take: wait %v, want at most %v", wait, limit)
		}
		if after.After(deadline) {
			t.Fatalf("scheduled message not taken within %v", patience)
		}
		time.Sleep(wait)
	}
}

func ids(ms []*sms.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func stats(t *testing.T, q queue.Queue) map[sms.Class]queue.ClassStats {
	t.Helper()
	st, err := q.Stats(t.Context())
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

func outstanding(t *testing.T, q queue.Queue, producer string) int64 {
	t.Helper()
	n, err := q.Outstanding(t.Context(), producer)
	if err != nil {
		t.Fatalf("Outstanding %s: %v", producer, err)
	}
	return n
}

// canceled returns a context that is already cancelled.
func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// requeueSpent requeues l with o, spending an attempt, and checks that the
// message is queued again with one attempt more and o.LastError stored, and
// that l is lost.
func requeueSpent(t *testing.T, q queue.Queue, l *queue.Leased, o queue.RequeueOptions) {
	t.Helper()
	o.SpendAttempt = true
	if err := q.Requeue(t.Context(), l, o); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	m := wantStatus(t, q, l.Message.ID, sms.StatusQueued)
	if m.Attempts != l.Message.Attempts+1 || m.LastError != o.LastError {
		t.Fatalf("after Requeue(%+v): attempts %d, last error %q; want %d, %q", o, m.Attempts, m.LastError, l.Message.Attempts+1, o.LastError)
	}
	allLost(t, q, l)
}

// firstTaken is a new queue of h holding two messages of producer p and
// class c, a then b, with a taken (opts()).
func firstTaken(t *testing.T, h Harness, c sms.Class) (q queue.Queue, a, b *sms.Message, l *queue.Leased) {
	t.Helper()
	q = h.New(t)
	a, b = newMsg("p", c), newMsg("p", c)
	mustEnqueue(t, q, a, b)
	l = mustTake(t, q, opts())
	if l.Message.ID != a.ID {
		t.Fatalf("took %s, want the first queued, %s", l.Message.ID, a.ID)
	}
	return q, a, b, l
}

// wantEnded checks that message id of producer p, which ended (what: how),
// left nothing behind: nothing to take, none outstanding, no lease to
// recover, no dead letter to retry.
func wantEnded(t *testing.T, q queue.Queue, id, what string) {
	t.Helper()
	mustEmpty(t, q, opts())
	if n := outstanding(t, q, "p"); n != 0 {
		t.Fatalf("Outstanding = %d after the %s message", n, what)
	}
	if n, err := q.Recover(t.Context()); err != nil || n != 0 {
		t.Fatalf("Recover = %d, %v", n, err)
	}
	if err := q.RetryDead(t.Context(), id); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("RetryDead of a %s message: %v, want ErrNotFound", what, err)
	}
}

// takenAlone is a new queue of h holding m alone, taken (opts()).
func takenAlone(t *testing.T, h Harness, m *sms.Message) (queue.Queue, *queue.Leased) {
	t.Helper()
	q := h.New(t)
	mustEnqueue(t, q, m)
	return q, mustTake(t, q, opts())
}

// handlesOn is q and, when the backend has MultiClient, n more handles on
// its storage.
func handlesOn(t *testing.T, h Harness, q queue.Queue, n int) []queue.Queue {
	t.Helper()
	handles := []queue.Queue{q}
	if h.MultiClient != nil {
		handles = append(handles, h.MultiClient(t, q, n)...)
	}
	return handles
}

// facet is q as the optional interface T of the queue seam (queue.Outbox,
// queue.Budgets, queue.Batches, queue.Routes, queue.UsageReader), which
// every backend implements.
func facet[T any](t *testing.T, q queue.Queue) T {
	t.Helper()
	f, ok := q.(T)
	if !ok {
		var zero T
		t.Fatalf("%T does not implement %T", q, &zero)
	}
	return f
}
