package queuetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// The lifecycle cases: delivery receipts and cancel.
//
//   - ApplyReceipt matches by Reference (our id) or, without one, by the
//     provider id Complete recorded for sent. It moves sent only; a final
//     message or a second receipt changes nothing (ReceiptDuplicate); a
//     message queued or sending parks the first receipt, and Complete with
//     sent then stores the receipt's status (SentAt and ProviderID kept).
//   - Cancel moves a queued (or scheduled) message of its producer to
//     canceled: out of line, out of Outstanding, never taken. Another
//     producer's id is ErrNotFound; sending or done is ErrNotCancelable.
//     Cancel and Take racing for a message: exactly one wins.

func applyReceipt(t *testing.T, q queue.Queue, r queue.Receipt, want queue.ReceiptResult) *sms.Message {
	t.Helper()
	out, err := q.ApplyReceipt(t.Context(), r)
	if err != nil {
		t.Fatalf("ApplyReceipt(%+v): %v", r, err)
	}
	if out.Result != want {
		t.Fatalf("ApplyReceipt(%+v) = %s, want %s", r, out.Result, want)
	}
	if (out.Message == nil) != (want == queue.ReceiptUnknown) {
		t.Fatalf("ApplyReceipt(%+v): message %v with result %s", r, out.Message, out.Result)
	}
	return out.Message
}

func sendOne(t *testing.T, q queue.Queue, pid string) *sms.Message {
	t.Helper()
	m, l := enqueueTake(t, q, sms.ClassTransactional)
	if err := q.Complete(t.Context(), l, queue.Outcome{Status: sms.StatusSent, ProviderID: pid, Attempts: 1}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	return m
}

func testReceiptApplied(t *testing.T, h Harness) {
	q := h.New(t)
	a := sendOne(t, q, "pm-a-"+newMsg("x", 0).ID)
	b := sendOne(t, q, "pm-b-"+newMsg("x", 0).ID)
	pidA := mustGet(t, q, a.ID).ProviderID

	// by provider id alone
	got := applyReceipt(t, q, queue.Receipt{ProviderID: pidA, Status: sms.StatusDelivered}, queue.ReceiptApplied)
	if got.ID != a.ID || got.Status != sms.StatusDelivered {
		t.Fatalf("receipt by provider id: %s %s, want %s delivered", got.ID, got.Status, a.ID)
	}
	// by reference, with an error code
	got = applyReceipt(t, q, queue.Receipt{Reference: b.ID, ProviderID: "whatever", Status: sms.StatusUndelivered, ErrorCode: "30005"},
		queue.ReceiptApplied)
	if got.Status != sms.StatusUndelivered || got.LastError != "30005" {
		t.Fatalf("receipt by reference: %s %q", got.Status, got.LastError)
	}
	// replays and contradicting receipts change nothing
	for _, r := range []queue.Receipt{
		{ProviderID: pidA, Status: sms.StatusDelivered},
		{ProviderID: pidA, Status: sms.StatusUndelivered},
		{Reference: a.ID, Status: sms.StatusFailed},
		{Reference: b.ID, Status: sms.StatusDelivered},
	} {
		applyReceipt(t, q, r, queue.ReceiptDuplicate)
	}
	ma := wantStatus(t, q, a.ID, sms.StatusDelivered)
	if ma.ProviderID != pidA || ma.SentAt.IsZero() {
		t.Fatalf("delivered message lost its send: provider id %q, sent at %v", ma.ProviderID, ma.SentAt)
	}
	wantStatus(t, q, b.ID, sms.StatusUndelivered)
	// unknown ids
	applyReceipt(t, q, queue.Receipt{ProviderID: "pm-nobody", Status: sms.StatusDelivered}, queue.ReceiptUnknown)
	// (a fresh id of ours not stored yet is parked: testRecordSentEarlyReceipt)
	applyReceipt(t, q, queue.Receipt{Reference: sms.NewID(time.Now().Add(-queue.EarlyReceiptWindow - time.Minute)), Status: sms.StatusDelivered},
		queue.ReceiptUnknown)
	// what no backend accepts
	for _, r := range []queue.Receipt{
		{ProviderID: pidA, Status: sms.StatusSent},
		{ProviderID: pidA, Status: sms.StatusCanceled},
		{Status: sms.StatusDelivered},
	} {
		if _, err := q.ApplyReceipt(t.Context(), r); err == nil {
			t.Errorf("ApplyReceipt(%+v): no error", r)
		}
	}
	wantStatus(t, q, a.ID, sms.StatusDelivered)
}

func testReceiptEarly(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	// while sending: parked, then applied by Complete
	a, la := enqueueTake(t, q, sms.ClassOTP)
	got := applyReceipt(t, q, queue.Receipt{Reference: a.ID, Status: sms.StatusDelivered}, queue.ReceiptParked)
	if got.Status != sms.StatusSending {
		t.Fatalf("parked receipt changed the status to %s", got.Status)
	}
	applyReceipt(t, q, queue.Receipt{Reference: a.ID, Status: sms.StatusUndelivered}, queue.ReceiptDuplicate)
	if err := q.Complete(ctx, la, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm-early-" + a.ID, Attempts: 1}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	m := wantStatus(t, q, a.ID, sms.StatusDelivered)
	if m.SentAt.IsZero() || m.ProviderID != "pm-early-"+a.ID {
		t.Fatalf("early receipt: sent at %v, provider id %q", m.SentAt, m.ProviderID)
	}
	applyReceipt(t, q, queue.Receipt{ProviderID: "pm-early-" + a.ID, Status: sms.StatusDelivered}, queue.ReceiptDuplicate)

	// while queued again after an unknown outcome: parked through the
	// requeue, applied by the next Complete
	b, lb := enqueueTake(t, q, sms.ClassOTP)
	if err := q.Requeue(ctx, lb, queue.RequeueOptions{SpendAttempt: true, LastError: "timeout"}); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	applyReceipt(t, q, queue.Receipt{Reference: b.ID, Status: sms.StatusUndelivered, ErrorCode: "EC1"}, queue.ReceiptParked)
	wantStatus(t, q, b.ID, sms.StatusQueued)
	lb = mustTake(t, q, opts(sms.ClassOTP))
	if err := q.Complete(ctx, lb, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm-b", Attempts: 2}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if m := wantStatus(t, q, b.ID, sms.StatusUndelivered); m.LastError != "EC1" {
		t.Fatalf("parked error code: %q", m.LastError)
	}

	// a parked receipt does not override a failure the send records
	c, lc := enqueueTake(t, q, sms.ClassOTP)
	applyReceipt(t, q, queue.Receipt{Reference: c.ID, Status: sms.StatusDelivered}, queue.ReceiptParked)
	if err := q.Complete(ctx, lc, queue.Outcome{Status: sms.StatusFailed, Reason: "rejected", Attempts: 1}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	wantStatus(t, q, c.ID, sms.StatusFailed)
	applyReceipt(t, q, queue.Receipt{Reference: c.ID, Status: sms.StatusDelivered}, queue.ReceiptDuplicate)
}

func testCancel(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	a := newMsg("p", sms.ClassMarketing)
	sched := newMsg("p", sms.ClassMarketing)
	sched.SendAt = time.Now().Add(time.Hour)
	sched.NotBefore = sched.SendAt
	other := newMsg("p", sms.ClassMarketing)
	mustEnqueue(t, q, a, sched, other)
	if n := outstanding(t, q, "p"); n != 3 {
		t.Fatalf("Outstanding %d, want 3", n)
	}
	if _, err := q.Cancel(ctx, a.ID, "someone-else"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Cancel by another producer: %v, want ErrNotFound", err)
	}
	if _, err := q.Cancel(ctx, newMsg("p", 0).ID, "p"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Cancel of an unknown id: %v, want ErrNotFound", err)
	}
	for _, m := range []*sms.Message{a, sched} {
		got, err := q.Cancel(ctx, m.ID, "p")
		if err != nil {
			t.Fatalf("Cancel %s: %v", m.ID, err)
		}
		if got.Status != sms.StatusCanceled {
			t.Fatalf("Cancel %s: status %s", m.ID, got.Status)
		}
		wantStatus(t, q, m.ID, sms.StatusCanceled)
		// Canceled is final: what is kept (and answered) is the final
		// record, without the body or the full number.
		read, err := q.Get(ctx, m.ID)
		if err != nil {
			t.Fatalf("Get %s: %v", m.ID, err)
		}
		for what, v := range map[string]*sms.Message{"Cancel's answer": got, "Get": read} {
			if v.Body != "" || v.To == m.To || v.To == "" || v.Producer != "p" || v.Reference != m.Reference {
				t.Fatalf("%s for canceled %s keeps body %q, number %q (sent %q), producer %q, reference %q",
					what, m.ID, v.Body, v.To, m.To, v.Producer, v.Reference)
			}
		}
		if _, err := q.Cancel(ctx, m.ID, "p"); !errors.Is(err, queue.ErrNotCancelable) {
			t.Fatalf("second Cancel %s: %v, want ErrNotCancelable", m.ID, err)
		}
	}
	if n := outstanding(t, q, "p"); n != 1 {
		t.Fatalf("Outstanding %d after two cancels, want 1", n)
	}
	st := stats(t, q)[sms.ClassMarketing]
	if st.Ready != 1 || st.Scheduled != 0 {
		t.Fatalf("Stats after cancel: %+v, want 1 ready, 0 scheduled", st)
	}
	l := mustTake(t, q, opts(sms.ClassMarketing))
	if l.Message.ID != other.ID {
		t.Fatalf("took %s, want %s (the canceled ones never leave)", l.Message.ID, other.ID)
	}
	if _, err := q.Cancel(ctx, other.ID, "p"); !errors.Is(err, queue.ErrNotCancelable) {
		t.Fatalf("Cancel while sending: %v, want ErrNotCancelable", err)
	}
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm", Attempts: 1}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if _, err := q.Cancel(ctx, other.ID, "p"); !errors.Is(err, queue.ErrNotCancelable) {
		t.Fatalf("Cancel of a sent message: %v, want ErrNotCancelable", err)
	}
	mustEmpty(t, q, opts(sms.ClassMarketing))
	// a canceled message takes no receipt
	applyReceipt(t, q, queue.Receipt{Reference: a.ID, Status: sms.StatusDelivered}, queue.ReceiptDuplicate)
	wantStatus(t, q, a.ID, sms.StatusCanceled)
}

func testCancelRacesTake(t *testing.T, h Harness) {
	q := h.New(t)
	handles := []queue.Queue{q, q}
	if h.MultiClient != nil {
		handles = h.MultiClient(t, q, 2)
	}
	const n = 200
	msgs := make([]*sms.Message, n)
	for i := range msgs {
		msgs[i] = newMsg("p", sms.ClassTransactional)
	}
	mustEnqueue(t, q, msgs...)
	var (
		wg       sync.WaitGroup
		taken    = map[string]bool{}
		canceled = map[string]bool{}
	)
	ctx := t.Context()
	wg.Go(func() {
		for {
			l, _, err := handles[0].Take(ctx, opts(sms.ClassTransactional))
			if errors.Is(err, queue.ErrEmpty) {
				return
			}
			if err != nil {
				t.Errorf("Take: %v", err)
				return
			}
			taken[l.Message.ID] = true
		}
	})
	wg.Go(func() {
		// from the back, so that the two meet in the middle
		for i := range msgs {
			m := msgs[len(msgs)-1-i]
			_, err := handles[1].Cancel(ctx, m.ID, "p")
			switch {
			case err == nil:
				canceled[m.ID] = true
			case !errors.Is(err, queue.ErrNotCancelable):
				t.Errorf("Cancel %s: %v", m.ID, err)
			}
		}
	})
	wg.Wait()
	for _, m := range msgs {
		want := sms.StatusSending
		if canceled[m.ID] {
			want = sms.StatusCanceled
		}
		if taken[m.ID] == canceled[m.ID] {
			t.Errorf("%s: taken %v, canceled %v: want exactly one", m.ID, taken[m.ID], canceled[m.ID])
		}
		if got := mustGet(t, q, m.ID).Status; got != want {
			t.Errorf("%s: status %s, want %s", m.ID, got, want)
		}
	}
	t.Logf("%d taken, %d canceled", len(taken), len(canceled))
	if n := outstanding(t, q, "p"); n != int64(len(taken)) {
		t.Errorf("Outstanding %d, want %d (the taken ones)", n, len(taken))
	}
}

// testReceiptDurable: the provider-id index and a parked receipt survive a
// reopen of the storage.
func testReceiptDurable(t *testing.T, h Harness) {
	if h.Reopen == nil {
		t.Skip("no Reopen")
	}
	q := h.New(t)
	a := sendOne(t, q, "pm-durable-"+newMsg("x", 0).ID)
	pid := mustGet(t, q, a.ID).ProviderID
	b, lb := enqueueTake(t, q, sms.ClassOTP)
	applyReceipt(t, q, queue.Receipt{Reference: b.ID, Status: sms.StatusUndelivered}, queue.ReceiptParked)
	q = h.Reopen(t, q)
	applyReceipt(t, q, queue.Receipt{ProviderID: pid, Status: sms.StatusDelivered}, queue.ReceiptApplied)
	if err := q.Complete(t.Context(), lb, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm-b", Attempts: 1}); err != nil {
		t.Fatalf("Complete after reopen: %v", err)
	}
	wantStatus(t, q, b.ID, sms.StatusUndelivered)
}
