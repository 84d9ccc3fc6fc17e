package queuetest

import (
	"errors"
	"testing"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// Cases where the two backends once answered differently (an audit ran the
// same steps on both):
//
//   - a receipt parked on a queued message (it came after an attempt whose
//     outcome was unknown) is handed out with the lease (Leased.Receipt),
//     so the send loop stores the message as sent without sending it
//     again, and makes Cancel ErrNotCancelable; one for a dead letter is
//     parked on it too, and handed out after RetryDead;
//   - an empty Reason (Complete) or reason (Dead) keeps the stored
//     LastError;
//   - TakeMore takes from one class: the first of opt.Classes with a ready
//     message;
//   - Enqueue of an id already stored returns it with Existed;
//   - DeadLetters with a limit of 0 returns none;
//   - Take drops a ready entry whose message is not queued rather than
//     erroring (covered by the Redis package's own test, which can write
//     such an entry).

func testParkedReceiptHandedOut(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	m, l := enqueueTake(t, q, sms.ClassTransactional)
	if l.Receipt != "" {
		t.Fatalf("a message without a receipt handed out with %q", l.Receipt)
	}
	// the attempt's outcome is unknown: back in line, an attempt spent
	if err := q.Requeue(ctx, l, queue.RequeueOptions{SpendAttempt: true, LastError: "timeout"}); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	applyReceipt(t, q, queue.Receipt{Reference: m.ID, Status: sms.StatusDelivered}, queue.ReceiptParked)

	got, err := q.Cancel(ctx, m.ID, "p")
	if !errors.Is(err, queue.ErrNotCancelable) {
		t.Fatalf("Cancel of a queued message with a parked receipt: %v, want ErrNotCancelable", err)
	}
	if got == nil || got.Status != sms.StatusDelivered {
		t.Fatalf("Cancel's message %+v: want the receipt's status", got)
	}
	wantStatus(t, q, m.ID, sms.StatusQueued)
	if n := outstanding(t, q, "p"); n != 1 {
		t.Fatalf("Outstanding %d after a refused cancel, want 1", n)
	}

	l = mustTake(t, q, opts(sms.ClassTransactional))
	if l.Message.ID != m.ID || l.Receipt != sms.StatusDelivered {
		t.Fatalf("took %s with receipt %q, want %s with delivered", l.Message.ID, l.Receipt, m.ID)
	}
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, Attempts: l.Message.Attempts}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	done := wantStatus(t, q, m.ID, sms.StatusDelivered)
	if done.Attempts != 1 || done.SentAt.IsZero() {
		t.Fatalf("stored: attempts %d, sent at %v; want 1 and a time", done.Attempts, done.SentAt)
	}
	if n := outstanding(t, q, "p"); n != 0 {
		t.Fatalf("Outstanding %d once done, want 0", n)
	}
}

func testEmptyReasonKeepsLastError(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	retried := func() *queue.Leased {
		t.Helper()
		_, l := enqueueTake(t, q, sms.ClassMarketing)
		if err := q.Requeue(ctx, l, queue.RequeueOptions{SpendAttempt: true, LastError: "provider 503"}); err != nil {
			t.Fatalf("Requeue: %v", err)
		}
		return mustTake(t, q, opts(sms.ClassMarketing))
	}
	sent := retried()
	if err := q.Complete(ctx, sent, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm-" + sent.Message.ID, Attempts: 2}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if m := wantStatus(t, q, sent.Message.ID, sms.StatusSent); m.LastError != "provider 503" {
		t.Errorf("sent after a retry: LastError %q, want the stored %q", m.LastError, "provider 503")
	}
	dead := retried()
	if err := q.Dead(ctx, dead, "", 2); err != nil {
		t.Fatalf("Dead: %v", err)
	}
	if m := wantStatus(t, q, dead.Message.ID, sms.StatusFailed); m.LastError != "provider 503" || !m.Dead {
		t.Errorf("dead with no reason: LastError %q, dead %v; want the stored %q", m.LastError, m.Dead, "provider 503")
	}
	failed := retried()
	if err := q.Complete(ctx, failed, queue.Outcome{Status: sms.StatusFailed, Reason: "rejected", Attempts: 2}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if m := wantStatus(t, q, failed.Message.ID, sms.StatusFailed); m.LastError != "rejected" {
		t.Errorf("failed with a reason: LastError %q, want %q", m.LastError, "rejected")
	}
	if dl, err := q.DeadLetters(ctx, 0); err != nil || len(dl) != 0 {
		t.Errorf("DeadLetters(0) = %d, %v: want none", len(dl), err)
	}
}

func testTakeMoreOneClass(t *testing.T, h Harness) {
	q := h.New(t)
	tr := newMsg("p", sms.ClassTransactional)
	mustEnqueue(t, q, tr)
	var mk []*sms.Message
	for range 3 {
		m := newMsg("p", sms.ClassMarketing)
		mk = append(mk, m)
		mustEnqueue(t, q, m)
	}
	got, err := q.TakeMore(t.Context(), opts(sms.ClassTransactional, sms.ClassMarketing), 10, 100)
	if err != nil || len(got) != 1 || got[0].Message.ID != tr.ID {
		t.Fatalf("TakeMore(transactional, marketing) = %d, %v: want the transactional one alone", len(got), err)
	}
	got, err = q.TakeMore(t.Context(), opts(sms.ClassTransactional, sms.ClassMarketing), 10, 100)
	if err != nil || len(got) != 3 || got[0].Message.ID != mk[0].ID {
		t.Fatalf("TakeMore again = %d, %v: want the three marketing, oldest first", len(got), err)
	}
}

func testEnqueueSameID(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	m := newMsg("p", sms.ClassTransactional)
	mustEnqueue(t, q, m)
	again := *m
	res, err := q.Enqueue(ctx, &again)
	if err != nil || res.Err != nil || !res.Existed || res.Message == nil || res.Message.ID != m.ID {
		t.Fatalf("Enqueue of a stored id = %+v, %v: want the stored message with Existed", res, err)
	}
	if n := outstanding(t, q, "p"); n != 1 {
		t.Fatalf("Outstanding %d after a retried enqueue, want 1", n)
	}
	l := mustTake(t, q, opts(sms.ClassTransactional))
	mustEmpty(t, q, opts(sms.ClassTransactional))
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm-" + m.ID, Attempts: 1}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	res, err = q.Enqueue(ctx, &again)
	if err != nil || res.Err != nil || !res.Existed || res.Message == nil || res.Message.Status != sms.StatusSent {
		t.Fatalf("Enqueue of a sent id = %+v, %v: want its final record with Existed", res, err)
	}
	mustEmpty(t, q, opts(sms.ClassTransactional))
}

// testReceiptOnDeadLetter: attempts that all ended unknown made a message
// a dead letter, yet one reached the provider, whose receipt comes now. It
// is parked on the dead letter, so an operator's RetryDead does not send
// the message again: the next take hands the receipt out with the lease.
func testReceiptOnDeadLetter(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	m := newMsg("p", sms.ClassTransactional)
	mustEnqueue(t, q, m)
	if err := q.Dead(ctx, mustTake(t, q, opts(sms.ClassTransactional)), "timeout", 5); err != nil {
		t.Fatalf("Dead: %v", err)
	}
	got := applyReceipt(t, q, queue.Receipt{Reference: m.ID, Status: sms.StatusDelivered}, queue.ReceiptParked)
	if got.Status != sms.StatusFailed || !got.Dead {
		t.Fatalf("a receipt parked on a dead letter changed it: %s, dead %v", got.Status, got.Dead)
	}
	applyReceipt(t, q, queue.Receipt{Reference: m.ID, Status: sms.StatusUndelivered}, queue.ReceiptDuplicate)
	if err := q.RetryDead(ctx, m.ID); err != nil {
		t.Fatalf("RetryDead: %v", err)
	}
	l := mustTake(t, q, opts(sms.ClassTransactional))
	if l.Message.ID != m.ID || l.Receipt != sms.StatusDelivered {
		t.Fatalf("took %s with receipt %q, want %s with delivered", l.Message.ID, l.Receipt, m.ID)
	}
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, Attempts: l.Message.Attempts}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	wantStatus(t, q, m.ID, sms.StatusDelivered)
}
