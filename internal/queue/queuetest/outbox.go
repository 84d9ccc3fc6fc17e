package queuetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

var outboxCases = []testCase{
	{"OutboxEventPerTransition", testOutboxEventPerTransition},
	{"OutboxClaimAck", testOutboxClaimAck},
	{"OutboxCrashRedelivers", testOutboxCrashRedelivers},
	{"OutboxRetryBackoff", testOutboxRetryBackoff},
	{"OutboxDeadAfterMaxAge", testOutboxDeadAfterMaxAge},
	{"RecordSent", testRecordSent},
	{"RecordSentEarlyReceipt", testRecordSentEarlyReceipt},
	{"OutboxDurable", testOutboxDurable},
	{"OutboxConcurrentClaims", testOutboxConcurrentClaims},
	{"OutboxReceiptsAndCancel", testOutboxReceiptsAndCancel},
	{"OutboxReceiptAfterFinalRecord", testOutboxReceiptAfterFinalRecord},
}

func outbox(t *testing.T, q queue.Queue) queue.Outbox {
	t.Helper()
	return facet[queue.Outbox](t, q)
}

// fastPathOTP is an OTP of producer login that wants status events, as
// the fast path sends it: its provider id is prefix and the end of its id.
func fastPathOTP(prefix string) *sms.Message {
	m := notified("login")
	m.Class = sms.ClassOTP
	m.ProviderID = prefix + m.ID[len(m.ID)-6:]
	return m
}

// newOutbox is a new queue of h and its outbox.
func newOutbox(t *testing.T, h Harness) (queue.Queue, queue.Outbox) {
	t.Helper()
	q := h.New(t)
	return q, outbox(t, q)
}

// notified is a message that wants status events.
func notified(producer string) *sms.Message {
	m := newMsg(producer, sms.ClassTransactional)
	m.Callbacks = true
	m.Reference = "ref-" + m.ID[len(m.ID)-6:]
	m.CallbackURL = "https://hooks.example/cb/1"
	return m
}

// finish enqueues m, takes it and ends it with end.
func finish(t *testing.T, q queue.Queue, m *sms.Message, end func(l *queue.Leased) error) {
	t.Helper()
	mustEnqueue(t, q, m)
	l := mustTake(t, q, opts(m.Class))
	if l.Message.ID != m.ID {
		t.Fatalf("took %s, want %s", l.Message.ID, m.ID)
	}
	if err := end(l); err != nil {
		t.Fatalf("end %s: %v", m.ID, err)
	}
}

// finishSent enqueues m, takes it and completes it as sent with provider
// id pid.
func finishSent(t *testing.T, q queue.Queue, m *sms.Message, pid string) {
	t.Helper()
	finish(t, q, m, func(l *queue.Leased) error {
		return q.Complete(t.Context(), l, queue.Outcome{Status: sms.StatusSent, ProviderID: pid, Attempts: 1})
	})
}

// onlyEvent checks that o holds exactly one event, ready, and claims it.
func onlyEvent(t *testing.T, o queue.Outbox) *queue.Event {
	t.Helper()
	wantOutbox(t, o, 1, 0)
	evs := claimAll(t, o, "t", time.Hour)
	if len(evs) != 1 {
		t.Fatalf("claimed %d events, want 1", len(evs))
	}
	return evs[0].Event
}

func claimAll(t *testing.T, o queue.Outbox, owner string, lease time.Duration) []*queue.LeasedEvent {
	t.Helper()
	evs, err := o.ClaimEvents(t.Context(), owner, lease, 100)
	if err != nil {
		t.Fatalf("ClaimEvents: %v", err)
	}
	return evs
}

func ack(t *testing.T, o queue.Outbox, le *queue.LeasedEvent) {
	t.Helper()
	if err := o.AckEvent(t.Context(), le); err != nil {
		t.Fatalf("AckEvent: %v", err)
	}
}

func wantOutbox(t *testing.T, o queue.Outbox, backlog, dead int64) queue.OutboxStats {
	t.Helper()
	s, err := o.OutboxStats(t.Context())
	if err != nil {
		t.Fatalf("OutboxStats: %v", err)
	}
	if s.Backlog != backlog || s.Dead != dead {
		t.Fatalf("OutboxStats = %+v, want backlog %d dead %d", s, backlog, dead)
	}
	return s
}

func testOutboxEventPerTransition(t *testing.T, h Harness) {
	q, o := newOutbox(t, h)
	ctx := t.Context()
	sent, failed, expired, dead, quiet := notified("p"), notified("p"), notified("p"), notified("p"), newMsg("p", sms.ClassTransactional)
	finishSent(t, q, sent, "pm-1")
	finish(t, q, failed, func(l *queue.Leased) error {
		return q.Complete(ctx, l, queue.Outcome{Status: sms.StatusFailed, Reason: "provider refused: 400", Attempts: 1})
	})
	finish(t, q, expired, func(l *queue.Leased) error {
		return q.Complete(ctx, l, queue.Outcome{Status: sms.StatusExpired, Reason: "ttl passed", Attempts: 0})
	})
	finish(t, q, dead, func(l *queue.Leased) error { return q.Dead(ctx, l, "5xx every time", 8) })
	finishSent(t, q, quiet, "pm-2")
	s := wantOutbox(t, o, 4, 0)
	if s.OldestAge < 0 || s.OldestAge > time.Hour {
		t.Errorf("OldestAge %v", s.OldestAge)
	}
	evs := claimAll(t, o, "t", time.Hour)
	if len(evs) != 4 {
		t.Fatalf("claimed %d events, want 4 (one per transition of a message with callbacks)", len(evs))
	}
	want := map[string]struct {
		status     sms.Status
		code, pm   string
		reasonPart string
	}{
		sent.ID:    {sms.StatusSent, "", "pm-1", ""},
		failed.ID:  {sms.StatusFailed, queue.EventErrorRejected, "", "provider refused: 400"},
		expired.ID: {sms.StatusExpired, queue.EventErrorExpired, "", "ttl passed"},
		dead.ID:    {sms.StatusFailed, queue.EventErrorExhausted, "", "5xx every time"},
	}
	ids := map[string]bool{}
	for _, le := range evs {
		e := le.Event
		w, ok := want[e.MessageID]
		if !ok {
			t.Fatalf("event for unexpected message %s", e.MessageID)
		}
		delete(want, e.MessageID)
		if e.ID == "" || ids[e.ID] {
			t.Errorf("event id %q empty or repeated", e.ID)
		}
		ids[e.ID] = true
		if e.Status != w.status || e.ErrorCode != w.code || e.ProviderID != w.pm || e.ErrorReason != w.reasonPart ||
			e.Producer != "p" || e.Class != sms.ClassTransactional || e.Segments != sent.Segments ||
			e.Reference != "ref-"+e.MessageID[len(e.MessageID)-6:] || e.CallbackURL != "https://hooks.example/cb/1" ||
			e.At.IsZero() || e.Attempts != 0 || e.Dead {
			t.Errorf("event %+v, want %+v", e, w)
		}
	}
}

func testOutboxClaimAck(t *testing.T, h Harness) {
	q, o := newOutbox(t, h)
	ctx := t.Context()
	finishSent(t, q, notified("p"), "pm")
	evs := claimAll(t, o, "a", time.Hour)
	if len(evs) != 1 {
		t.Fatalf("claimed %d, want 1", len(evs))
	}
	if again := claimAll(t, o, "b", time.Hour); len(again) != 0 {
		t.Fatalf("a claimed event was claimed again under its lease: %d", len(again))
	}
	wantOutbox(t, o, 1, 0)
	if err := o.AckEvent(ctx, evs[0]); err != nil {
		t.Fatalf("AckEvent: %v", err)
	}
	wantOutbox(t, o, 0, 0)
	wantLost(t, "second AckEvent", o.AckEvent(ctx, evs[0]))
	if _, err := o.RetryEvent(ctx, evs[0], queue.EventRetry{MaxAge: time.Hour}); !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("RetryEvent after ack: %v, want ErrLeaseLost", err)
	}
}

// A replica that claimed an event and died before acking: once the lease
// passes, another claims the same event (same ID, same fields) and the
// dead one's late ack fails.
func testOutboxCrashRedelivers(t *testing.T, h Harness) {
	q, o := newOutbox(t, h)
	ctx := t.Context()
	finish(t, q, notified("p"), func(l *queue.Leased) error { return q.Dead(ctx, l, "gone", 3) })
	first := claimAll(t, o, "dies", 50*time.Millisecond)
	if len(first) != 1 {
		t.Fatalf("claimed %d, want 1", len(first))
	}
	var second []*queue.LeasedEvent
	deadline := time.Now().Add(patience)
	for len(second) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the expired claim was never claimable again")
		}
		time.Sleep(10 * time.Millisecond)
		second = claimAll(t, o, "survivor", time.Hour)
	}
	a, b := *first[0].Event, *second[0].Event
	if a != b {
		t.Fatalf("redelivered event differs:\n first  %+v\n second %+v", a, b)
	}
	wantLost(t, "the dead claim's ack", o.AckEvent(ctx, first[0]))
	if err := o.AckEvent(ctx, second[0]); err != nil {
		t.Fatalf("AckEvent: %v", err)
	}
	wantOutbox(t, o, 0, 0)
}

func testOutboxRetryBackoff(t *testing.T, h Harness) {
	q, o := newOutbox(t, h)
	ctx := t.Context()
	finishSent(t, q, notified("p"), "pm")
	evs := claimAll(t, o, "a", time.Hour)
	dead, err := o.RetryEvent(ctx, evs[0], queue.EventRetry{After: time.Hour, SpendAttempt: true, LastError: "503", MaxAge: 24 * time.Hour})
	if err != nil || dead {
		t.Fatalf("RetryEvent = %v, %v", dead, err)
	}
	if got := claimAll(t, o, "b", time.Hour); len(got) != 0 {
		t.Fatalf("an event retried an hour later was claimable now")
	}
	wantOutbox(t, o, 1, 0)

	finishSent(t, q, notified("p"), "pm")
	evs = claimAll(t, o, "a", time.Hour)
	if len(evs) != 1 {
		t.Fatalf("claimed %d, want the new event only", len(evs))
	}
	id := evs[0].Event.ID
	for i := 1; i <= 2; i++ {
		if _, err := o.RetryEvent(ctx, evs[0], queue.EventRetry{SpendAttempt: true, LastError: "timeout", MaxAge: time.Hour}); err != nil {
			t.Fatal(err)
		}
		evs = claimAll(t, o, "a", time.Hour)
		if len(evs) != 1 || evs[0].Event.ID != id || evs[0].Event.Attempts != i || evs[0].Event.LastError != "timeout" {
			t.Fatalf("after %d retries: %+v, want the same id with attempts %d", i, evs, i)
		}
	}
	// Not spending an attempt (the endpoint was busy) keeps the count.
	if _, err := o.RetryEvent(ctx, evs[0], queue.EventRetry{MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if evs = claimAll(t, o, "a", time.Hour); len(evs) != 1 || evs[0].Event.Attempts != 2 {
		t.Fatalf("after a retry without an attempt: %+v", evs)
	}
}

func testOutboxDeadAfterMaxAge(t *testing.T, h Harness) {
	q, o := newOutbox(t, h)
	ctx := t.Context()
	m := notified("p")
	finishSent(t, q, m, "pm")
	evs := claimAll(t, o, "a", time.Hour)
	dead, err := o.RetryEvent(ctx, evs[0], queue.EventRetry{After: 2 * time.Hour, SpendAttempt: true, LastError: "HTTP 500", MaxAge: time.Hour})
	if err != nil || !dead {
		t.Fatalf("RetryEvent past max age = %v, %v; want dead", dead, err)
	}
	wantOutbox(t, o, 0, 1)
	if got := claimAll(t, o, "b", time.Hour); len(got) != 0 {
		t.Fatal("a dead event was claimable")
	}
	wantLost(t, "AckEvent of a dead event", o.AckEvent(ctx, evs[0]))
	list, err := o.DeadEvents(ctx, 10)
	if err != nil || len(list) != 1 {
		t.Fatalf("DeadEvents = %d, %v", len(list), err)
	}
	d := list[0]
	if d.ID != evs[0].Event.ID || !d.Dead || d.DeadAt.IsZero() || d.Attempts != 1 || d.LastError != "HTTP 500" || d.MessageID != m.ID {
		t.Fatalf("dead event %+v", d)
	}
	if err := o.RetryDeadEvent(ctx, "evt_unknown_1"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("RetryDeadEvent unknown: %v, want ErrNotFound", err)
	}
	if err := o.RetryDeadEvent(ctx, d.ID); err != nil {
		t.Fatalf("RetryDeadEvent: %v", err)
	}
	wantOutbox(t, o, 1, 0)
	again := claimAll(t, o, "b", time.Hour)
	if len(again) != 1 || again[0].Event.ID != d.ID || again[0].Event.Attempts != 0 || again[0].Event.Dead ||
		!again[0].Event.At.Equal(evs[0].Event.At) {
		t.Fatalf("after RetryDeadEvent: %+v, want the same event (same At) with attempts reset", again)
	}
	// Its max age counts from the retry: a retry within it is not dead.
	if dead, err := o.RetryEvent(ctx, again[0], queue.EventRetry{After: time.Minute, MaxAge: time.Hour}); err != nil || dead {
		t.Fatalf("RetryEvent after the operator's retry = %v, %v", dead, err)
	}
	if err := o.RetryDeadEvent(ctx, d.ID); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("RetryDeadEvent of an event no longer dead: %v, want ErrNotFound", err)
	}
}

// RecordSent stores an OTP sent on the fast path as a sent message: Get
// finds its final record (no body, no full number), a receipt by provider
// id or by reference moves it on, its sent event (and the receipt's) is
// written only with callbacks, and a second RecordSent of the id changes
// nothing.
func testRecordSent(t *testing.T, h Harness) {
	q, o := newOutbox(t, h)
	ctx := t.Context()
	m := fastPathOTP("pm-otp-")
	if st, err := q.RecordSent(ctx, m); err != nil || st != sms.StatusSent {
		t.Fatalf("RecordSent = %q, %v; want sent", st, err)
	}
	plain := newMsg("login", sms.ClassOTP)
	plain.ProviderID = "pm-plain-" + plain.ID[len(plain.ID)-6:]
	if st, err := q.RecordSent(ctx, plain); err != nil || st != sms.StatusSent {
		t.Fatalf("RecordSent without callbacks = %q, %v; want sent", st, err)
	}
	got := mustGet(t, q, m.ID)
	if got.Status != sms.StatusSent || got.Class != sms.ClassOTP || got.ProviderID != m.ProviderID ||
		got.Attempts != 1 || got.SentAt.IsZero() || got.Reference != m.Reference || got.Producer != "login" {
		t.Fatalf("Get after RecordSent: %+v", got)
	}
	if got.Body != "" || got.To == m.To {
		t.Fatalf("the record keeps the body %q or the full number %q", got.Body, got.To)
	}
	if n, err := q.Outstanding(ctx, "login"); err != nil || n != 0 {
		t.Fatalf("Outstanding after RecordSent = %d, %v; want 0 (nothing queued)", n, err)
	}
	evs := claimAll(t, o, "a", time.Hour)
	if len(evs) != 1 {
		t.Fatalf("claimed %d events, want 1 (the message with callbacks)", len(evs))
	}
	if e := evs[0].Event; e.MessageID != m.ID || e.Status != sms.StatusSent || e.ProviderID != m.ProviderID || e.Class != sms.ClassOTP {
		t.Fatalf("event %+v", e)
	}
	ack(t, o, evs[0])

	// Receipts find both: by provider id, and by reference (our id).
	d := applyReceipt(t, q, queue.Receipt{ProviderID: m.ProviderID, Status: sms.StatusDelivered}, queue.ReceiptApplied)
	if d.ID != m.ID || d.Status != sms.StatusDelivered {
		t.Fatalf("receipt by provider id: %s %s", d.ID, d.Status)
	}
	u := applyReceipt(t, q, queue.Receipt{Reference: plain.ID, ProviderID: "other", Status: sms.StatusUndelivered, ErrorCode: "30003"},
		queue.ReceiptApplied)
	if u.ID != plain.ID || u.Status != sms.StatusUndelivered {
		t.Fatalf("receipt by reference: %s %s", u.ID, u.Status)
	}
	evs = claimAll(t, o, "b", time.Hour)
	if len(evs) != 1 || evs[0].Event.MessageID != m.ID || evs[0].Event.Status != sms.StatusDelivered {
		t.Fatalf("events after the receipts: %d, want m's delivered only", len(evs))
	}
	ack(t, o, evs[0])

	// A second record of the id (a retry after an unknown outcome that got
	// through) neither moves it back nor writes another event.
	again := *m
	again.ProviderID = "pm-second"
	if st, err := q.RecordSent(ctx, &again); err != nil || st != "" {
		t.Fatalf("RecordSent again = %q, %v; want \"\" (stored already)", st, err)
	}
	if got := mustGet(t, q, m.ID); got.Status != sms.StatusDelivered || got.ProviderID != m.ProviderID {
		t.Fatalf("after a second RecordSent: %s %q, want delivered %q", got.Status, got.ProviderID, m.ProviderID)
	}
	if evs := claimAll(t, o, "c", time.Hour); len(evs) != 0 {
		t.Fatalf("a second RecordSent wrote %d events", len(evs))
	}
}

// A receipt that names, by reference, an id created moments ago and not
// stored (the provider answered the receipt before its send: an OTP of the
// fast path) is parked; RecordSent applies it, and the message's one event
// reports the receipt's status. A second such receipt is a duplicate; one
// for an id older than the window is unknown, and parks nothing.
func testRecordSentEarlyReceipt(t *testing.T, h Harness) {
	q, o := newOutbox(t, h)
	ctx := t.Context()
	m := fastPathOTP("pm-early-")
	if out, err := q.ApplyReceipt(ctx, queue.Receipt{Reference: m.ID, Status: sms.StatusUndelivered, ErrorCode: "30005"}); err != nil ||
		out.Result != queue.ReceiptParked || out.Message != nil {
		t.Fatalf("early receipt = %+v, %v; want parked without a message", out, err)
	}
	if out, err := q.ApplyReceipt(ctx, queue.Receipt{Reference: m.ID, Status: sms.StatusDelivered}); err != nil ||
		out.Result != queue.ReceiptDuplicate {
		t.Fatalf("second early receipt = %+v, %v; want a duplicate", out, err)
	}
	old := newMsg("login", sms.ClassOTP)
	old.ID = sms.NewID(time.Now().Add(-queue.EarlyReceiptWindow - time.Minute))
	applyReceipt(t, q, queue.Receipt{Reference: old.ID, Status: sms.StatusDelivered}, queue.ReceiptUnknown)
	if st, err := q.RecordSent(ctx, m); err != nil || st != sms.StatusUndelivered {
		t.Fatalf("RecordSent with a receipt parked = %q, %v; want undelivered", st, err)
	}
	got := mustGet(t, q, m.ID)
	if got.Status != sms.StatusUndelivered || got.LastError != "30005" || got.ProviderID != m.ProviderID || got.SentAt.IsZero() {
		t.Fatalf("Get = %+v; want undelivered 30005 with its provider id and send time", got)
	}
	evs := claimAll(t, o, "a", time.Hour)
	if len(evs) != 1 || evs[0].Event.Status != sms.StatusUndelivered || evs[0].Event.MessageID != m.ID {
		t.Fatalf("events %d; want one, undelivered, no sent", len(evs))
	}
	// The parked receipt was used up: a later one is a duplicate of the
	// final record, and the old id's RecordSent finds nothing parked.
	applyReceipt(t, q, queue.Receipt{Reference: m.ID, Status: sms.StatusDelivered}, queue.ReceiptDuplicate)
	old.ProviderID = "pm-old"
	if st, err := q.RecordSent(ctx, old); err != nil || st != sms.StatusSent {
		t.Fatalf("RecordSent of the old id = %q, %v; want sent", st, err)
	}
}

func testOutboxDurable(t *testing.T, h Harness) {
	if h.Reopen == nil {
		t.Skip("no Reopen")
	}
	q := h.New(t)
	finishSent(t, q, notified("p"), "pm")
	before := claimAll(t, outbox(t, q), "a", time.Millisecond)
	q = h.Reopen(t, q)
	o := outbox(t, q)
	var after []*queue.LeasedEvent
	deadline := time.Now().Add(patience)
	for len(after) == 0 && time.Now().Before(deadline) {
		after = claimAll(t, o, "b", time.Hour)
	}
	if len(before) != 1 || len(after) != 1 || after[0].Event.ID != before[0].Event.ID {
		t.Fatalf("claimed %d before and %d after reopening, want the same event", len(before), len(after))
	}
}

// Claims from several clients at once hand each event to exactly one.
func testOutboxConcurrentClaims(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	const n = 40
	for range n {
		finishSent(t, q, notified("p"), "pm")
	}
	clients := []queue.Queue{q, q, q, q}
	if h.MultiClient != nil {
		clients = append([]queue.Queue{q}, h.MultiClient(t, q, 3)...)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o := c.(queue.Outbox)
			for {
				evs, err := o.ClaimEvents(ctx, string(rune('a'+i)), time.Hour, 3)
				if err != nil || len(evs) == 0 {
					return
				}
				mu.Lock()
				for _, e := range evs {
					seen[e.Event.ID]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("%d distinct events claimed, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("event %s claimed %d times under a one-hour lease", id, k)
		}
	}
}

// Receipts and cancel write their events through the same writer: a
// receipt applied to a sent message writes delivered (or undelivered with
// its code), a duplicate writes nothing, a receipt parked before the send
// was recorded makes Complete write one event with the receipt's status,
// and a cancel writes canceled.
func testOutboxReceiptsAndCancel(t *testing.T, h Harness) {
	q, o := newOutbox(t, h)
	ctx := t.Context()
	sent, parked, canceled := notified("p"), notified("p"), notified("p")
	finishSent(t, q, sent, "pm-1")
	for range 2 { // the second is a duplicate
		if _, err := q.ApplyReceipt(ctx, queue.Receipt{Reference: sent.ID, ProviderID: "pm-1", Status: sms.StatusUndelivered, ErrorCode: "30003"}); err != nil {
			t.Fatalf("ApplyReceipt: %v", err)
		}
	}
	mustEnqueue(t, q, parked)
	l := mustTake(t, q, opts(parked.Class))
	if _, err := q.ApplyReceipt(ctx, queue.Receipt{Reference: parked.ID, ProviderID: "pm-2", Status: sms.StatusDelivered}); err != nil {
		t.Fatalf("early ApplyReceipt: %v", err)
	}
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm-2", Attempts: 1}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	mustEnqueue(t, q, canceled)
	if _, err := q.Cancel(ctx, canceled.ID, "p"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	evs := claimAll(t, o, "t", time.Hour)
	got := map[string][]string{}
	for _, le := range evs {
		e := le.Event
		got[e.MessageID] = append(got[e.MessageID], string(e.Status)+"/"+e.ErrorCode+"/"+e.ErrorReason)
	}
	want := map[string][]string{
		sent.ID:     {"sent//", "undelivered/undelivered/30003"},
		parked.ID:   {"delivered//"},
		canceled.ID: {"canceled//"},
	}
	for id, w := range want {
		g := got[id]
		slices.Sort(g)
		slices.Sort(w)
		if !slices.Equal(g, w) {
			t.Errorf("events of %s: %v, want %v", id, g, w)
		}
	}
	if len(evs) != 4 {
		t.Errorf("%d events, want 4", len(evs))
	}
}

// A message with callbacks is sent, so only its final record stays (no
// body, no full number); a later delivered receipt, found by our id or by
// the provider's id alone, still writes exactly one delivered event with
// the message's callback URL and reference, and a repeated receipt none.
func testOutboxReceiptAfterFinalRecord(t *testing.T, h Harness) {
	q, o := newOutbox(t, h)
	ctx := t.Context()
	byRef, byPid := notified("p"), notified("p")
	byPid.CallbackURL = "https://hooks.example/cb/2"
	for i, m := range []*sms.Message{byRef, byPid} {
		finish(t, q, m, func(l *queue.Leased) error {
			return q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: fmt.Sprintf("pm-final-%d-%s", i, m.ID), Attempts: 1})
		})
	}
	sent := claimAll(t, o, "t", time.Hour)
	if len(sent) != 2 {
		t.Fatalf("%d sent events, want 2", len(sent))
	}
	sentEv := map[string]*queue.Event{}
	for _, le := range sent {
		sentEv[le.Event.MessageID] = le.Event
		if err := o.AckEvent(ctx, le); err != nil {
			t.Fatalf("AckEvent: %v", err)
		}
	}
	if got := mustGet(t, q, byRef.ID); got.Status != sms.StatusSent || got.Body != "" || got.CallbackURL != byRef.CallbackURL {
		t.Fatalf("stored after sent: status %s, body %q, callback url %q; want sent, no body, the callback url",
			got.Status, got.Body, got.CallbackURL)
	}
	receipts := []queue.Receipt{
		{Reference: byRef.ID, ProviderID: "pm-final-0-" + byRef.ID, Status: sms.StatusDelivered},
		{ProviderID: "pm-final-1-" + byPid.ID, Status: sms.StatusDelivered},
	}
	for _, rc := range receipts {
		for i := range 2 { // the second is a duplicate
			out, err := q.ApplyReceipt(ctx, rc)
			if err != nil {
				t.Fatalf("ApplyReceipt: %v", err)
			}
			want := queue.ReceiptApplied
			if i == 1 {
				want = queue.ReceiptDuplicate
			}
			if out.Result != want {
				t.Fatalf("receipt %d: %v, want %v", i, out.Result, want)
			}
		}
	}
	evs := claimAll(t, o, "t", time.Hour)
	if len(evs) != 2 {
		t.Fatalf("%d events after the receipts, want 2 (one delivered per message)", len(evs))
	}
	for _, le := range evs {
		e := le.Event
		var m *sms.Message
		switch e.MessageID {
		case byRef.ID:
			m = byRef
		case byPid.ID:
			m = byPid
		default:
			t.Fatalf("event for unexpected message %s", e.MessageID)
		}
		s := sentEv[m.ID]
		if e.Status != sms.StatusDelivered || e.CallbackURL != m.CallbackURL || e.Reference != m.Reference ||
			e.Producer != "p" || e.Class != m.Class || e.Segments != s.Segments || e.Segments < 1 || e.ErrorCode != "" ||
			e.ProviderID != s.ProviderID || !strings.HasPrefix(e.ProviderID, "pm-final-") || e.ID == s.ID {
			t.Errorf("event %+v, want delivered with %s's callback url %q and reference %q", e, m.ID, m.CallbackURL, m.Reference)
		}
	}
	if evs[0].Event.MessageID == evs[1].Event.MessageID {
		t.Errorf("two events for %s", evs[0].Event.MessageID)
	}
}
