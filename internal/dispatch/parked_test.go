package dispatch

import (
	"context"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// TestReceiptForEarlierAttemptNotResent: the provider has a message whose
// send timed out (outcome unknown) and its receipt arrives before the
// retry. The retry's take hands the receipt out with the lease, and the
// message is stored as delivered without a second provider call.
func TestReceiptForEarlierAttemptNotResent(t *testing.T) {
	acct := newAccount(t)
	q := acct.queue(t, nil)
	calls := make(chan string, 16)
	prov := newRecorder(funcProvider(func(ctx context.Context, req *provider.Request) (provider.Result, error) {
		calls <- req.ID
		// the provider took it and its receipt is on its way while our
		// call ends without an answer
		if _, err := q.ApplyReceipt(context.Background(), queue.Receipt{Reference: req.ID, Status: sms.StatusDelivered}); err != nil {
			t.Errorf("ApplyReceipt: %v", err)
		}
		return provider.Result{}, &provider.Error{Reason: provider.ReasonTimeout, Temporary: true, Message: "injected: no answer"}
	}))
	m := newMsg(sms.ClassTransactional)
	enqueue(t, q, m)
	newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: prov,
		Workers: 2, BackoffBase: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond})
	got := waitTerminal(t, q, m.ID)[m.ID]
	if got.Status != sms.StatusDelivered || got.Attempts != 1 || got.SentAt.IsZero() {
		t.Errorf("stored %s after %d attempts (sent at %v); want delivered after 1", got.Status, got.Attempts, got.SentAt)
	}
	if n := len(prov.calls()); n != 1 {
		t.Errorf("the provider was called %d times for a message it had; want 1", n)
	}
}
