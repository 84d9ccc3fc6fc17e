package queuetest

import (
	"errors"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// The suppressed cases: a message the provider refused because its
// recipient opted out (sms.StatusSuppressed).
//
//   - Complete with suppressed ends the lease as a final status, as failed
//     does for a permanent refusal: out of line and of Outstanding, never
//     taken again, not a dead letter (RetryDead ErrNotFound, DeadLetters
//     without it, Stats' Dead 0); Get answers suppressed from the final
//     record (no body, the number masked) with the reason as LastError and
//     the attempts given; a stale ack is ErrLeaseLost and changes nothing;
//     Cancel is ErrNotCancelable; it survives Reopen.
//   - A message stored with Callbacks gets exactly one event in the same
//     step: status suppressed, error code queue.EventErrorOptedOut, the
//     reason. One without gets none.
//   - A receipt parked before the refusal is dropped (the refusal decides);
//     a receipt after it is a duplicate and changes nothing.
//   - Complete with a status that cannot end a lease (queue.CompleteStatus:
//     queued, delivered, canceled, ...) is an error that changes nothing.

func init() {
	cases = append(cases,
		testCase{"CompleteSuppressed", testCompleteSuppressed},
		testCase{"SuppressedEvent", testSuppressedEvent},
		testCase{"CompleteOnlyLeaseEnds", testCompleteOnlyLeaseEnds},
	)
}

// suppressedOutcome is the outcome the send loop records for a provider's
// opt-out refusal.
var suppressedOutcome = queue.Outcome{Status: sms.StatusSuppressed, Reason: "provider: opted_out (status 400): twilio 21610", Attempts: 2}

func testCompleteSuppressed(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	m := newMsg("p", sms.ClassMarketing)
	m.Body = "Spring sale! Reply STOP to opt out"
	mustEnqueue(t, q, m)
	l := mustTake(t, q, opts())
	// An earlier attempt's outcome was unknown and its receipt came: the
	// refusal decides.
	applyReceipt(t, q, queue.Receipt{Reference: m.ID, Status: sms.StatusDelivered}, queue.ReceiptParked)
	if err := q.Complete(ctx, l, suppressedOutcome); err != nil {
		t.Fatalf("Complete suppressed: %v", err)
	}
	check := func(q queue.Queue) {
		t.Helper()
		got := wantStatus(t, q, m.ID, sms.StatusSuppressed)
		if got.Attempts != suppressedOutcome.Attempts || got.LastError != suppressedOutcome.Reason || got.Dead ||
			got.Body != "" || got.To != sms.MaskPhone(m.To) || got.ProviderID != "" || !got.SentAt.IsZero() || got.UpdatedAt.IsZero() {
			t.Fatalf("suppressed message = %+v", got)
		}
		if !got.Status.Final() || got.StatusAt(got.UpdatedAt) != sms.StatusSuppressed {
			t.Fatalf("suppressed is not final: %+v", got)
		}
	}
	check(q)
	allLost(t, q, l)
	check(q)
	mustEmpty(t, q, opts())
	if n := outstanding(t, q, "p"); n != 0 {
		t.Fatalf("Outstanding = %d after suppressed", n)
	}
	if n, err := q.Recover(ctx); err != nil || n != 0 {
		t.Fatalf("Recover = %d, %v", n, err)
	}
	if err := q.RetryDead(ctx, m.ID); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("RetryDead of a suppressed message: %v, want ErrNotFound", err)
	}
	if dead, err := q.DeadLetters(ctx, 10); err != nil || len(dead) != 0 {
		t.Fatalf("DeadLetters = %v, %v; want none", dead, err)
	}
	if st := stats(t, q)[sms.ClassMarketing]; st.Dead != 0 || st.Ready != 0 || st.Leased != 0 {
		t.Fatalf("Stats = %+v", st)
	}
	if _, err := q.Cancel(ctx, m.ID, "p"); !errors.Is(err, queue.ErrNotCancelable) {
		t.Fatalf("Cancel of a suppressed message: %v, want ErrNotCancelable", err)
	}
	for _, r := range []queue.Receipt{{Reference: m.ID, Status: sms.StatusDelivered}, {Reference: m.ID, Status: sms.StatusFailed}} {
		applyReceipt(t, q, r, queue.ReceiptDuplicate)
	}
	check(q)
	if h.Reopen != nil {
		check(h.Reopen(t, q))
	}
}

func testSuppressedEvent(t *testing.T, h Harness) {
	q := h.New(t)
	o := outbox(t, q)
	ctx := t.Context()
	with, without := notified("p"), newMsg("p", sms.ClassTransactional)
	for _, m := range []*sms.Message{with, without} {
		finish(t, q, m, func(l *queue.Leased) error { return q.Complete(ctx, l, suppressedOutcome) })
	}
	wantOutbox(t, o, 1, 0)
	evs := claimAll(t, o, "t", time.Hour)
	if len(evs) != 1 {
		t.Fatalf("claimed %d events, want 1", len(evs))
	}
	e := evs[0].Event
	if e.MessageID != with.ID || e.Status != sms.StatusSuppressed || e.ErrorCode != queue.EventErrorOptedOut ||
		e.ErrorReason != suppressedOutcome.Reason || e.Reference != with.Reference || e.ProviderID != "" || e.At.IsZero() {
		t.Fatalf("event %+v", e)
	}
	if got := queue.EventErrorCode(sms.StatusSuppressed, false); got != queue.EventErrorOptedOut {
		t.Fatalf("EventErrorCode(suppressed) = %q", got)
	}
}

func testCompleteOnlyLeaseEnds(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	m := newMsg("p", sms.ClassTransactional)
	mustEnqueue(t, q, m)
	l := mustTake(t, q, opts())
	for _, s := range []sms.Status{sms.StatusQueued, sms.StatusSending, sms.StatusDelivered, sms.StatusUndelivered,
		sms.StatusCanceled, sms.StatusScheduled, sms.StatusUnknown} {
		if queue.CompleteStatus(s) {
			t.Fatalf("CompleteStatus(%s)", s)
		}
		if err := q.Complete(ctx, l, queue.Outcome{Status: s, Attempts: 1}); err == nil {
			t.Fatalf("Complete with %s: no error", s)
		}
	}
	wantStatus(t, q, m.ID, sms.StatusSending)
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSuppressed, Attempts: 1}); err != nil {
		t.Fatalf("Complete suppressed after the refused ones: %v", err)
	}
	wantStatus(t, q, m.ID, sms.StatusSuppressed)
}
