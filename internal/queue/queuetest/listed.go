package queuetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// The take-time suppression cases (queue.Suppression): a message whose
// number was put on the suppression list after it was queued.
//
//   - A take with a Suppression ends every message it reaches whose
//     NumberID is on the list, of a class the list covers: suppressed,
//     LastError queue.ListedReason, no attempt spent, not a dead letter,
//     out of line and of Outstanding, its final record (no body, no
//     number, no id), one event with queue.EventErrorSuppressed when it
//     wants events; Ended hears of each. It goes on and hands out the next
//     message whose number is not listed, in the order it would have;
//     TakeMore still fills its batch from the class it took from. The
//     ended message is never handed out, survives Reopen, and Cancel of it
//     is ErrNotCancelable.
//   - Not checked: OTP unless Suppression.OTP; a message without a
//     NumberID (stored before ids were kept); one with a parked receipt
//     (it reached the provider already); any take without a Suppression.
//   - A scheduled message is checked when it falls due: suppressed after
//     it was accepted, it is never handed out.
//   - A take that meets more listed messages than queue.MaxSuppressedPerTake
//     still ends them all and hands out the first sendable one.

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

// listedTakes is a take's options with a suppression list: the harness's
// list, with Ended recording what the takes ended.
type listedTakes struct {
	add func(id string)
	s   queue.Suppression

	mu    sync.Mutex
	ended []*sms.Message
}

// suppressions returns the harness's suppression list over q, or skips
// the case when the backend has none.
func suppressions(t *testing.T, h Harness, q queue.Queue) *listedTakes {
	t.Helper()
	if h.Suppressions == nil {
		t.Skip("the harness has no suppression list")
	}
	l := &listedTakes{}
	l.s, l.add = h.Suppressions(t, q)
	l.s.Ended = func(m *sms.Message) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.ended = append(l.ended, m)
	}
	return l
}

// opts are opts(classes...) reading the list; otp checks OTP too.
func (l *listedTakes) opts(otp bool, classes ...sms.Class) queue.TakeOptions {
	o := opts(classes...)
	s := l.s
	s.OTP = otp
	o.Suppression = &s
	return o
}

// endedIDs are the ids Ended heard of, in order.
func (l *listedTakes) endedIDs(t *testing.T) []string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, len(l.ended))
	for i, m := range l.ended {
		if m.Status != sms.StatusSuppressed {
			t.Errorf("Ended heard of %s as %s, want suppressed", m.ID, m.Status)
		}
		out[i] = m.ID
	}
	return out
}

// numberID is a distinct suppression-list id.
func numberID(i int) string { return fmt.Sprintf("%032x", time.Now().UnixNano()+int64(i)) }

// oneNumbered is a new queue with its suppression list, holding one
// transactional message m whose number's id is id (not on the list).
func oneNumbered(t *testing.T, h Harness) (queue.Queue, *listedTakes, string, *sms.Message) {
	t.Helper()
	q := h.New(t)
	l := suppressions(t, h, q)
	id := numberID(1)
	m := withNumber(sms.ClassTransactional, id)
	mustEnqueue(t, q, m)
	return q, l, id, m
}

// withNumber is a message of class c whose number's id is id.
func withNumber(c sms.Class, id string) *sms.Message {
	m := newMsg("p", c)
	m.NumberID = id
	return m
}

// wantListed asserts that id was ended by a take because its number is
// listed: suppressed with the list's reason, attempts as stored, kept as a
// final record.
func wantListed(t *testing.T, q queue.Queue, id string, attempts int) {
	t.Helper()
	got := wantStatus(t, q, id, sms.StatusSuppressed)
	if got.LastError != queue.ListedReason || got.Attempts != attempts || got.Dead || got.Body != "" ||
		got.NumberID != "" || got.To != sms.MaskPhone("+819012345678") || !got.SentAt.IsZero() || got.UpdatedAt.IsZero() ||
		got.ProviderID != "" {
		t.Fatalf("suppressed at take: %+v", got)
	}
}

func testTakeEndsSuppressed(t *testing.T, h Harness) {
	q := h.New(t)
	o := outbox(t, q)
	l := suppressions(t, h, q)
	ctx := t.Context()
	listed, other := numberID(1), numberID(2)
	l.add(listed)

	// In take order: a transactional message to the listed number (with
	// events, one attempt spent already), one without an id (stored
	// before ids were kept), then marketing to the listed number and one
	// to another number.
	withEvents := notified("p")
	withEvents.NumberID = listed
	noID := newMsg("p", sms.ClassTransactional)
	quiet := withNumber(sms.ClassMarketing, listed)
	sendable := withNumber(sms.ClassMarketing, other)
	mustEnqueue(t, q, withEvents)
	first := mustTake(t, q, opts()) // before the list is read: handed out
	if first.Message.ID != withEvents.ID {
		t.Fatalf("took %s, want %s", first.Message.ID, withEvents.ID)
	}
	if err := q.Requeue(ctx, first, queue.RequeueOptions{SpendAttempt: true, LastError: "503"}); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, q, noID, quiet, sendable)

	if got := mustTake(t, q, l.opts(false)); got.Message.ID != noID.ID {
		t.Fatalf("took %s, want %s (no id: handed out)", got.Message.ID, noID.ID)
	}
	got := mustTake(t, q, l.opts(false))
	if got.Message.ID != sendable.ID || got.Message.NumberID != other {
		t.Fatalf("took %s (%s), want %s: the listed ones are ended on the way", got.Message.ID, got.Message.NumberID, sendable.ID)
	}
	if ended := l.endedIDs(t); !slices.Equal(ended, []string{withEvents.ID, quiet.ID}) {
		t.Fatalf("Ended heard of %v, want %v", ended, []string{withEvents.ID, quiet.ID})
	}
	check := func(q queue.Queue) {
		t.Helper()
		wantListed(t, q, withEvents.ID, 1)
		wantListed(t, q, quiet.ID, 0)
	}
	check(q)
	mustEmpty(t, q, l.opts(false))
	mustEmpty(t, q, opts())
	if n := outstanding(t, q, "p"); n != 2 {
		t.Fatalf("Outstanding = %d, want 2 (the two handed out)", n)
	}
	st := stats(t, q)
	if tr, mk := st[sms.ClassTransactional], st[sms.ClassMarketing]; tr.Ready != 0 || tr.Leased != 1 || tr.Dead != 0 ||
		mk.Ready != 0 || mk.Leased != 1 || mk.Dead != 0 {
		t.Fatalf("Stats = %+v", st)
	}
	if dead, err := q.DeadLetters(ctx, 10); err != nil || len(dead) != 0 {
		t.Fatalf("DeadLetters = %v, %v; want none", dead, err)
	}
	for _, id := range []string{withEvents.ID, quiet.ID} {
		if _, err := q.Cancel(ctx, id, "p"); !errors.Is(err, queue.ErrNotCancelable) {
			t.Fatalf("Cancel of a suppressed message: %v, want ErrNotCancelable", err)
		}
		applyReceipt(t, q, queue.Receipt{Reference: id, Status: sms.StatusDelivered}, queue.ReceiptDuplicate)
	}

	// One event, for the message that wants them.
	e := onlyEvent(t, o)
	if e.MessageID != withEvents.ID || e.Status != sms.StatusSuppressed || e.ErrorCode != queue.EventErrorSuppressed ||
		e.ErrorReason != queue.ListedReason || e.Reference != withEvents.Reference || e.ProviderID != "" || e.At.IsZero() {
		t.Fatalf("event %+v", e)
	}
	check(q)
	if h.Reopen != nil {
		check(h.Reopen(t, q))
	}
}

func testTakeSuppressedOTP(t *testing.T, h Harness) {
	q := h.New(t)
	l := suppressions(t, h, q)
	id := numberID(1)
	l.add(id)
	a, b := withNumber(sms.ClassOTP, id), withNumber(sms.ClassOTP, id)
	mustEnqueue(t, q, a, b)
	// OTP is exempt unless the list covers it (protection.suppress_otp).
	if got := mustTake(t, q, l.opts(false)); got.Message.ID != a.ID {
		t.Fatalf("took %s, want %s", got.Message.ID, a.ID)
	}
	mustEmpty(t, q, l.opts(true))
	wantListed(t, q, b.ID, 0)
	wantStatus(t, q, a.ID, sms.StatusSending)
	if ended := l.endedIDs(t); !slices.Equal(ended, []string{b.ID}) {
		t.Fatalf("Ended heard of %v, want %s", ended, b.ID)
	}
}

func testTakeMoreSuppressed(t *testing.T, h Harness) {
	q := h.New(t)
	l := suppressions(t, h, q)
	listed := numberID(1)
	l.add(listed)
	var ms []*sms.Message
	for i := range 7 {
		id := numberID(10 + i)
		if i%2 == 0 {
			id = listed
		}
		ms = append(ms, withNumber(sms.ClassMarketing, id))
	}
	tr := withNumber(sms.ClassTransactional, numberID(20))
	mustEnqueue(t, q, ms...)
	mustEnqueue(t, q, tr)
	// Take hands out the first sendable message of the first class that
	// has one; TakeMore fills the batch from the class it asks for,
	// ending the listed ones on the way: 0, 2, 4 ended; 1, 3, 5 taken.
	if got := mustTake(t, q, l.opts(false, sms.ClassMarketing)); got.Message.ID != ms[1].ID {
		t.Fatalf("Take: %s, want %s", got.Message.ID, ms[1].ID)
	}
	more, err := q.TakeMore(t.Context(), l.opts(false, sms.ClassMarketing), 2, 10)
	if err != nil {
		t.Fatalf("TakeMore: %v", err)
	}
	if got := ids(leasedMessages(more)); !slices.Equal(got, []string{ms[3].ID, ms[5].ID}) {
		t.Fatalf("TakeMore took %v, want %v", got, []string{ms[3].ID, ms[5].ID})
	}
	for _, m := range []*sms.Message{ms[0], ms[2], ms[4]} {
		wantListed(t, q, m.ID, 0)
	}
	// The last one is listed too: TakeMore ends it and takes nothing.
	if rest, err := q.TakeMore(t.Context(), l.opts(false, sms.ClassMarketing), 4, 10); err != nil || len(rest) != 0 {
		t.Fatalf("TakeMore of a listed message = %d, %v; want none", len(rest), err)
	}
	wantListed(t, q, ms[6].ID, 0)
	if ended := l.endedIDs(t); !slices.Equal(ended, ids([]*sms.Message{ms[0], ms[2], ms[4], ms[6]})) {
		t.Fatalf("Ended heard of %v", ended)
	}
	if got := mustTake(t, q, l.opts(false)); got.Message.ID != tr.ID {
		t.Fatalf("Take: %s, want %s", got.Message.ID, tr.ID)
	}
	if n := outstanding(t, q, "p"); n != 4 {
		t.Fatalf("Outstanding = %d, want the 4 taken", n)
	}
}

func testTakeSuppressedScheduled(t *testing.T, h Harness) {
	q := h.New(t)
	l := suppressions(t, h, q)
	listed := numberID(1)
	at := time.Now().Add(300 * time.Millisecond)
	a, b := withNumber(sms.ClassMarketing, listed), withNumber(sms.ClassMarketing, numberID(2))
	a.NotBefore, a.SendAt, b.NotBefore, b.SendAt = at, at, at, at
	// One call: both fall due at the same time, a first in line.
	if _, err := q.EnqueueMany(t.Context(), []*sms.Message{a, b}); err != nil {
		t.Fatal(err)
	}
	if w := mustEmpty(t, q, l.opts(false)); w <= 0 {
		t.Fatalf("wait %v before the scheduled messages are due", w)
	}
	// Suppressed after it was accepted, before it falls due.
	l.add(listed)
	if got := takeWhenDue(t, q, l.opts(false), at); got.Message.ID != b.ID {
		t.Fatalf("took %s, want %s", got.Message.ID, b.ID)
	}
	wantListed(t, q, a.ID, 0)
	mustEmpty(t, q, l.opts(false))
}

func testTakeSuppressedParkedReceipt(t *testing.T, h Harness) {
	q, l, id, m := oneNumbered(t, h)
	first := mustTake(t, q, opts())
	// The attempt's outcome was unknown, then its receipt came: the
	// provider has it, whatever the list says now.
	if err := q.Requeue(t.Context(), first, queue.RequeueOptions{SpendAttempt: true, LastError: "timeout"}); err != nil {
		t.Fatal(err)
	}
	applyReceipt(t, q, queue.Receipt{Reference: m.ID, Status: sms.StatusDelivered}, queue.ReceiptParked)
	l.add(id)
	got := mustTake(t, q, l.opts(true))
	if got.Message.ID != m.ID || got.Receipt != sms.StatusDelivered {
		t.Fatalf("took %s with receipt %q; want %s with its parked receipt", got.Message.ID, got.Receipt, m.ID)
	}
	if ended := l.endedIDs(t); len(ended) != 0 {
		t.Fatalf("Ended heard of %v", ended)
	}
}

func testTakeSuppressedMany(t *testing.T, h Harness) {
	q := h.New(t)
	l := suppressions(t, h, q)
	listed := numberID(1)
	l.add(listed)
	n := queue.MaxSuppressedPerTake*2 + 1
	ms := make([]*sms.Message, n)
	for i := range ms {
		ms[i] = withNumber(sms.ClassMarketing, listed)
	}
	last := withNumber(sms.ClassMarketing, numberID(2))
	if _, err := q.EnqueueMany(t.Context(), append(ms, last)); err != nil {
		t.Fatal(err)
	}
	if got := mustTake(t, q, l.opts(false)); got.Message.ID != last.ID {
		t.Fatalf("took %s, want %s after %d listed ones", got.Message.ID, last.ID, n)
	}
	if ended := l.endedIDs(t); !slices.Equal(ended, ids(ms)) {
		t.Fatalf("Ended heard of %d messages, want the %d listed ones in order", len(ended), n)
	}
	wantListed(t, q, ms[n-1].ID, 0)
	if st := stats(t, q)[sms.ClassMarketing]; st.Ready != 0 || st.Leased != 1 {
		t.Fatalf("Stats = %+v", st)
	}
	if got := outstanding(t, q, "p"); got != 1 {
		t.Fatalf("Outstanding = %d, want 1", got)
	}
}

// leasedMessages are the messages of ls.
func leasedMessages(ls []*queue.Leased) []*sms.Message {
	out := make([]*sms.Message, len(ls))
	for i, l := range ls {
		out[i] = l.Message
	}
	return out
}

// suppressedOutcome is the outcome the send loop records for a provider's
// opt-out refusal.
var suppressedOutcome = queue.Outcome{Status: sms.StatusSuppressed, Reason: "provider: opted_out (status 400): twilio 21610", Attempts: 2}

func testCompleteSuppressed(t *testing.T, h Harness) {
	m := newMsg("p", sms.ClassMarketing)
	m.Body = "Spring sale! Reply STOP to opt out"
	q, l := takenAlone(t, h, m)
	ctx := t.Context()
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
	wantEnded(t, q, m.ID, "suppressed")
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
	e := onlyEvent(t, o)
	if e.MessageID != with.ID || e.Status != sms.StatusSuppressed || e.ErrorCode != queue.EventErrorOptedOut ||
		e.ErrorReason != suppressedOutcome.Reason || e.Reference != with.Reference || e.ProviderID != "" || e.At.IsZero() {
		t.Fatalf("event %+v", e)
	}
	if got := queue.EventErrorCode(sms.StatusSuppressed, false); got != queue.EventErrorOptedOut {
		t.Fatalf("EventErrorCode(suppressed) = %q", got)
	}
}

func testCompleteOnlyLeaseEnds(t *testing.T, h Harness) {
	m := newMsg("p", sms.ClassTransactional)
	q, l := takenAlone(t, h, m)
	ctx := t.Context()
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
