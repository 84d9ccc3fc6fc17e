package queuetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

var cases = []testCase{
	{"EnqueueGet", testEnqueueGet},
	{"EnqueueInvalid", testEnqueueInvalid},
	{"ClassOrder", testClassOrder},
	{"FIFOWithinClass", testFIFO},
	{"NotBefore", testNotBefore},
	{"TakeClasses", testTakeClasses},
	{"TakeMore", testTakeMore},
	{"Idempotency", testIdempotency},
	{"LeaseHeld", testLeaseHeld},
	{"ExtendKeepsLease", testExtend},
	{"RecoverHandsOn", testRecover},
	{"Requeue", testRequeue},
	{"RequeueKeepPlace", testRequeueKeepPlace},
	{"RequeueAfter", testRequeueAfter},
	{"CrashesCounted", testCrashes},
	{"Complete", testComplete},
	{"FinalRecord", testFinalRecord},
	{"DeadLetters", testDeadLetters},
	{"Stats", testStats},
	{"ScheduledWithin", testScheduledWithin},
	{"Outstanding", testOutstanding},
	{"ConcurrentTakers", testConcurrentTakers},
	{"ConcurrentMultiClient", testConcurrentMultiClient},
	{"Durability", testDurability},
	{"ContextCancelled", testContextCancelled},
	{"Closed", testClosed},
	// alike.go
	{"ParkedReceiptHandedOut", testParkedReceiptHandedOut},
	{"EmptyReasonKeepsLastError", testEmptyReasonKeepsLastError},
	{"TakeMoreOneClass", testTakeMoreOneClass},
	{"EnqueueSameID", testEnqueueSameID},
	{"ReceiptOnDeadLetter", testReceiptOnDeadLetter},
	// batches.go
	{"BatchIndex", testBatchIndex},
	{"BatchIndexOnlyStored", testBatchIndexOnlyStored},
	{"BatchIndexKeptAfterEnd", testBatchIndexKeptAfterEnd},
	// budget.go
	{"BudgetChargedWithStore", testBudgetChargedWithStore},
	{"BudgetGivenBack", testBudgetGivenBack},
	{"BudgetConcurrent", testBudgetConcurrent},
	{"BudgetNextPeriod", testBudgetNextPeriod},
	{"BudgetOutsideEnqueue", testBudgetOutsideEnqueue},
	// lifecycle.go
	{"ReceiptApplied", testReceiptApplied},
	{"ReceiptEarly", testReceiptEarly},
	{"Cancel", testCancel},
	{"CancelRacesTake", testCancelRacesTake},
	{"ReceiptDurable", testReceiptDurable},
	// listed.go
	{"TakeEndsSuppressed", testTakeEndsSuppressed},
	{"TakeSuppressedOTP", testTakeSuppressedOTP},
	{"TakeMoreSuppressed", testTakeMoreSuppressed},
	{"TakeSuppressedScheduled", testTakeSuppressedScheduled},
	{"TakeSuppressedParkedReceipt", testTakeSuppressedParkedReceipt},
	{"TakeSuppressedMany", testTakeSuppressedMany},
	{"CompleteSuppressed", testCompleteSuppressed},
	{"SuppressedEvent", testSuppressedEvent},
	{"CompleteOnlyLeaseEnds", testCompleteOnlyLeaseEnds},
	// replies.go
	{"RoutesLatestSenderWins", testRoutesLatestSenderWins},
	{"ReplyOneEventPerID", testReplyOneEventPerID},
	{"ReplyDeadAndRetried", testReplyDeadAndRetried},
	{"RepliesDurable", testRepliesDurable},
	// usage.go
	{"UsageCounts", testUsageCounts},
	{"UsageSuppressed", testUsageSuppressed},
}

func testEnqueueGet(t *testing.T, h Harness) {
	q := h.New(t)
	m := newMsg("p", sms.ClassTransactional)
	m.From = "ACME"
	m.NumberID = "0123456789abcdef0123456789abcdef"
	m.IdempotencyKey = "k1"
	m.RequestHash = "h1"
	m.ExpiresAt = m.CreatedAt.Add(time.Hour)
	m.CallbackURL = "https://hooks.example/sms?t=1"
	m.Callbacks = true
	res, err := q.Enqueue(t.Context(), m)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if res.Existed || res.Message == nil || res.Message.ID != m.ID || res.Message.Status != sms.StatusQueued {
		t.Fatalf("Enqueue = %+v: want the new message, queued", res)
	}
	got := wantStatus(t, q, m.ID, sms.StatusQueued)
	want := *m
	want.Status = sms.StatusQueued
	// UpdatedAt is the backend's to keep; compare everything else.
	got.UpdatedAt = time.Time{}
	if got.ID != want.ID || got.Producer != want.Producer || got.Class != want.Class || got.To != want.To ||
		got.NumberID != want.NumberID || got.From != want.From || got.Body != want.Body || got.Reference != want.Reference ||
		got.CallbackURL != want.CallbackURL || got.Callbacks != want.Callbacks ||
		got.Segments != want.Segments || got.IdempotencyKey != want.IdempotencyKey ||
		got.RequestHash != want.RequestHash || !got.CreatedAt.Equal(want.CreatedAt) ||
		!got.ExpiresAt.Equal(want.ExpiresAt) || got.Attempts != 0 || got.Dead {
		t.Fatalf("Get = %+v\nwant %+v", got, want)
	}
	if _, err := q.Get(t.Context(), sms.NewID(time.Now())); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Get unknown id: %v, want ErrNotFound", err)
	}
}

func testEnqueueInvalid(t *testing.T, h Harness) {
	q := h.New(t)
	noID := newMsg("p", sms.ClassOTP)
	noID.ID = ""
	if _, err := q.Enqueue(t.Context(), noID); err == nil {
		t.Fatal("Enqueue without an id: no error")
	}
	good := newMsg("p", sms.ClassOTP)
	res, err := q.EnqueueMany(t.Context(), []*sms.Message{noID, good})
	if err != nil {
		t.Fatalf("EnqueueMany: %v (one bad item must not fail the batch)", err)
	}
	if len(res) != 2 || res[0].Err == nil || res[1].Err != nil {
		t.Fatalf("EnqueueMany results %+v: want an error for item 0 only", res)
	}
	wantStatus(t, q, good.ID, sms.StatusQueued)
	if n := outstanding(t, q, "p"); n != 1 {
		t.Fatalf("Outstanding = %d, want 1", n)
	}
}

func testClassOrder(t *testing.T, h Harness) {
	q := h.New(t)
	byClass := map[sms.Class][]string{}
	// Enqueued lowest priority first, so that order of arrival cannot explain
	// the order of taking.
	for range 3 {
		for _, c := range []sms.Class{sms.ClassMarketing, sms.ClassTransactional, sms.ClassOTP} {
			m := newMsg("p", c)
			mustEnqueue(t, q, m)
			byClass[c] = append(byClass[c], m.ID)
		}
	}
	want := slices.Concat(byClass[sms.ClassOTP], byClass[sms.ClassTransactional], byClass[sms.ClassMarketing])
	var got []string
	for range want {
		got = append(got, mustTake(t, q, opts()).Message.ID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("take order\n got %v\nwant %v", got, want)
	}
	if w := mustEmpty(t, q, opts()); w != 0 {
		t.Fatalf("empty queue: wait %v, want 0", w)
	}
}

func testFIFO(t *testing.T, h Harness) {
	q := h.New(t)
	var want []string
	for range 30 {
		m := newMsg("p", sms.ClassMarketing)
		mustEnqueue(t, q, m)
		want = append(want, m.ID)
	}
	batch := make([]*sms.Message, 20)
	for i := range batch {
		batch[i] = newMsg("p", sms.ClassMarketing)
	}
	if _, err := q.EnqueueMany(t.Context(), batch); err != nil {
		t.Fatalf("EnqueueMany: %v", err)
	}
	want = append(want, ids(batch)...)
	for i, id := range want {
		if got := mustTake(t, q, opts()).Message.ID; got != id {
			t.Fatalf("take %d: %s, want %s", i, got, id)
		}
	}
}

func testNotBefore(t *testing.T, h Harness) {
	q := h.New(t)
	later := newMsg("p", sms.ClassOTP)
	later.NotBefore = time.Now().Add(time.Hour)
	mustEnqueue(t, q, later)
	w := mustEmpty(t, q, opts())
	if w <= 59*time.Minute || w > time.Hour+slack {
		t.Fatalf("wait %v, want about 1h", w)
	}
	// The scheduled message is otp; a marketing taker has nothing to wait for.
	if w := mustEmpty(t, q, opts(sms.ClassMarketing)); w != 0 {
		t.Fatalf("marketing-only wait %v, want 0", w)
	}
	soon := newMsg("p", sms.ClassMarketing)
	soon.NotBefore = time.Now().Add(300 * time.Millisecond)
	mustEnqueue(t, q, soon)
	// A message whose not-before has passed is ready at once.
	past := newMsg("p", sms.ClassTransactional)
	past.NotBefore = time.Now().Add(-time.Minute)
	mustEnqueue(t, q, past)
	if got := mustTake(t, q, opts()).Message.ID; got != past.ID {
		t.Fatalf("took %s, want the past-due %s", got, past.ID)
	}
	l := takeWhenDue(t, q, opts(), soon.NotBefore)
	if l.Message.ID != soon.ID {
		t.Fatalf("took %s, want %s", l.Message.ID, soon.ID)
	}
	if w := mustEmpty(t, q, opts()); w <= 59*time.Minute {
		t.Fatalf("wait %v, want about 1h for the otp still scheduled", w)
	}
	if st := stats(t, q)[sms.ClassOTP]; st.Scheduled != 1 || st.Ready != 0 {
		t.Fatalf("otp stats %+v: want 1 scheduled, 0 ready", st)
	}
}

func testTakeClasses(t *testing.T, h Harness) {
	q := h.New(t)
	m1, m2, o1, o2 := newMsg("p", sms.ClassMarketing), newMsg("p", sms.ClassMarketing), newMsg("p", sms.ClassOTP), newMsg("p", sms.ClassOTP)
	mustEnqueue(t, q, m1, m2, o1)
	if got := mustTake(t, q, opts(sms.ClassOTP)).Message.ID; got != o1.ID {
		t.Fatalf("otp taker got %s, want %s", got, o1.ID)
	}
	mustEmpty(t, q, opts(sms.ClassOTP))
	mustEmpty(t, q, opts(sms.ClassTransactional))
	mustEnqueue(t, q, o2)
	// The caller's order is the priority order.
	if got := mustTake(t, q, opts(sms.ClassMarketing, sms.ClassOTP)).Message.ID; got != m1.ID {
		t.Fatalf("marketing-first taker got %s, want %s", got, m1.ID)
	}
	if got := mustTake(t, q, opts(sms.ClassTransactional, sms.ClassOTP)).Message.ID; got != o2.ID {
		t.Fatalf("txn,otp taker got %s, want %s", got, o2.ID)
	}
	if got := mustTake(t, q, opts()).Message.ID; got != m2.ID {
		t.Fatalf("any taker got %s, want %s", got, m2.ID)
	}
}

func testIdempotency(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	first := newMsg("p", sms.ClassTransactional)
	first.IdempotencyKey = "order-1"
	mustEnqueue(t, q, first)

	replay := newMsg("p", sms.ClassTransactional)
	replay.IdempotencyKey = "order-1"
	res, err := q.Enqueue(ctx, replay)
	if err != nil {
		t.Fatalf("Enqueue replay: %v", err)
	}
	if !res.Existed || res.Message == nil || res.Message.ID != first.ID || res.Message.Body != first.Body {
		t.Fatalf("replay = %+v: want Existed with the first message %s", res, first.ID)
	}
	if _, err := q.Get(ctx, replay.ID); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Get replay id: %v, want ErrNotFound (nothing stored)", err)
	}

	// The key is per producer.
	other := newMsg("q", sms.ClassTransactional)
	other.IdempotencyKey = "order-1"
	mustEnqueue(t, q, other)

	// In one batch: a new key twice, and the old key again.
	a, b, c := newMsg("p", sms.ClassMarketing), newMsg("p", sms.ClassMarketing), newMsg("p", sms.ClassMarketing)
	a.IdempotencyKey, b.IdempotencyKey, c.IdempotencyKey = "order-2", "order-2", "order-1"
	rs, err := q.EnqueueMany(ctx, []*sms.Message{a, b, c})
	if err != nil {
		t.Fatalf("EnqueueMany: %v", err)
	}
	if len(rs) != 3 {
		t.Fatalf("EnqueueMany: %d results, want 3", len(rs))
	}
	for i, want := range []struct {
		id      string
		existed bool
	}{{a.ID, false}, {a.ID, true}, {first.ID, true}} {
		r := rs[i]
		if r.Err != nil || r.Message == nil || r.Message.ID != want.id || r.Existed != want.existed {
			t.Fatalf("EnqueueMany[%d] = %+v: want id %s existed %v", i, r, want.id, want.existed)
		}
	}
	if n := outstanding(t, q, "p"); n != 2 {
		t.Fatalf("Outstanding(p) = %d, want 2 (replays store nothing)", n)
	}

	// After completion the replay still answers with the first message.
	for {
		l, _, err := q.Take(ctx, opts())
		if errors.Is(err, queue.ErrEmpty) {
			break
		}
		if err != nil {
			t.Fatalf("Take: %v", err)
		}
		if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm-" + l.Message.ID, Attempts: 1}); err != nil {
			t.Fatalf("Complete: %v", err)
		}
	}
	again := newMsg("p", sms.ClassTransactional)
	again.IdempotencyKey = "order-1"
	res, err = q.Enqueue(ctx, again)
	if err != nil {
		t.Fatalf("Enqueue after completion: %v", err)
	}
	if !res.Existed || res.Message.ID != first.ID || res.Message.Status != sms.StatusSent {
		t.Fatalf("replay after completion = %+v: want Existed, %s, sent", res.Message, first.ID)
	}
	mustEmpty(t, q, opts())
}

func testLeaseHeld(t *testing.T, h Harness) {
	m := newMsg("p", sms.ClassOTP)
	q, l := takenAlone(t, h, m)
	if l.Message.ID != m.ID || l.Message.Attempts != 0 {
		t.Fatalf("took %+v", l.Message)
	}
	mustEmpty(t, q, opts())
	if n, err := q.Recover(t.Context()); err != nil || n != 0 {
		t.Fatalf("Recover = %d, %v: want 0 while the lease holds", n, err)
	}
	mustEmpty(t, q, opts())
	wantStatus(t, q, m.ID, sms.StatusSending)
	if st := stats(t, q)[sms.ClassOTP]; st.Leased != 1 || st.Ready != 0 {
		t.Fatalf("stats %+v: want 1 leased", st)
	}
}

func testExtend(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	a, b := newMsg("p", sms.ClassOTP), newMsg("p", sms.ClassOTP)
	mustEnqueue(t, q, a, b)
	short := queue.TakeOptions{Owner: "w1", Lease: 400 * time.Millisecond}
	la := mustTake(t, q, short)
	if err := q.Extend(ctx, la, time.Hour); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	// b's lease starts after a's first one and is as long: once Recover
	// hands b on, a's first lease has run out too, and only the extension
	// can be keeping a.
	lb := mustTake(t, q, short)
	if lb.Message.ID != b.ID {
		t.Fatalf("took %s, want %s", lb.Message.ID, b.ID)
	}
	recoverAll(t, q, 1)
	if got := mustTake(t, q, opts()).Message.ID; got != b.ID {
		t.Fatalf("after Recover took %s, want %s", got, b.ID)
	}
	mustEmpty(t, q, opts())
	if err := q.Complete(ctx, la, queue.Outcome{Status: sms.StatusSent, Attempts: 1}); err != nil {
		t.Fatalf("Complete after Extend: %v", err)
	}
	wantLost(t, "Extend with a wrong token", q.Extend(ctx, &queue.Leased{Message: lb.Message, Token: "not-a-token"}, time.Hour))
	wantLost(t, "Extend of a recovered lease", q.Extend(ctx, lb, time.Hour))
}

func testRecover(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	a, b := newMsg("p", sms.ClassTransactional), newMsg("p", sms.ClassTransactional)
	mustEnqueue(t, q, a, b)
	l1 := mustTake(t, q, queue.TakeOptions{Owner: "w1", Lease: 200 * time.Millisecond})
	if l1.Message.ID != a.ID {
		t.Fatalf("took %s, want %s", l1.Message.ID, a.ID)
	}
	recoverAll(t, q, 1)
	got := wantStatus(t, q, a.ID, sms.StatusQueued)
	if got.Attempts != 0 {
		t.Fatalf("Recover spent an attempt: %d", got.Attempts)
	}
	// Recovered but not yet taken again: the old holder still has nothing.
	allLost(t, q, l1)
	wantStatus(t, q, a.ID, sms.StatusQueued)

	// A recovered message keeps its place ahead of later ones.
	l2 := mustTake(t, q, queue.TakeOptions{Owner: "w2", Lease: time.Hour})
	if l2.Message.ID != a.ID || l2.Message.Attempts != 0 {
		t.Fatalf("took %s (attempts %d), want %s again", l2.Message.ID, l2.Message.Attempts, a.ID)
	}
	if l2.Token == l1.Token {
		t.Fatal("new lease has the old token")
	}
	allLost(t, q, l1)
	wantStatus(t, q, a.ID, sms.StatusSending)
	if err := q.Complete(ctx, l2, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm-1", Attempts: 1}); err != nil {
		t.Fatalf("Complete by the new holder: %v", err)
	}
	m := wantStatus(t, q, a.ID, sms.StatusSent)
	if m.ProviderID != "pm-1" || m.Attempts != 1 {
		t.Fatalf("stale acks changed the message: %+v", m)
	}
}

// testRequeueKeepPlace: Requeue with KeepPlace puts the message back
// where it was taken from, ahead of what was queued after it (as Recover
// does), ignoring After; what it spends and stores is as for any Requeue.
func testRequeueKeepPlace(t *testing.T, h Harness) {
	q, a, b, l := firstTaken(t, h, sms.ClassMarketing)
	c := newMsg("p", sms.ClassMarketing)
	mustEnqueue(t, q, c)
	requeueSpent(t, q, l, queue.RequeueOptions{KeepPlace: true, After: time.Hour, LastError: "held"})
	var got []string
	for range 3 {
		got = append(got, mustTake(t, q, opts()).Message.ID)
	}
	if want := []string{a.ID, b.ID, c.ID}; !slices.Equal(got, want) {
		t.Fatalf("take order %v, want %v: back in its place", got, want)
	}
	if n := outstanding(t, q, "p"); n != 3 {
		t.Fatalf("Outstanding = %d, want 3", n)
	}
}

func testRequeue(t *testing.T, h Harness) {
	q, a, b, l := firstTaken(t, h, sms.ClassMarketing)
	ctx := t.Context()
	requeueSpent(t, q, l, queue.RequeueOptions{LastError: "provider 503"})
	// Requeued without delay: to the back of the line.
	if got := mustTake(t, q, opts()).Message.ID; got != b.ID {
		t.Fatalf("took %s, want %s ahead of the requeued %s", got, b.ID, a.ID)
	}
	l = mustTake(t, q, opts())
	if l.Message.ID != a.ID || l.Message.Attempts != 1 {
		t.Fatalf("took %s attempts %d, want %s with 1", l.Message.ID, l.Message.Attempts, a.ID)
	}
	// A rate denial does not spend an attempt.
	if err := q.Requeue(ctx, l, queue.RequeueOptions{}); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	l = mustTake(t, q, opts())
	if l.Message.Attempts != 1 {
		t.Fatalf("Requeue without spending: attempts %d, want 1", l.Message.Attempts)
	}
	before := time.Now()
	if err := q.Requeue(ctx, l, queue.RequeueOptions{After: time.Hour}); err != nil {
		t.Fatalf("Requeue after 1h: %v", err)
	}
	if w := mustEmpty(t, q, opts()); w <= 59*time.Minute || w > time.Hour+slack {
		t.Fatalf("wait %v, want about 1h", w)
	}
	m := wantStatus(t, q, a.ID, sms.StatusQueued)
	if m.NotBefore.Before(before.Add(time.Hour-time.Second)) || m.NotBefore.After(time.Now().Add(time.Hour+time.Second)) {
		t.Fatalf("NotBefore %v, want about now+1h", m.NotBefore)
	}
	if st := stats(t, q)[sms.ClassMarketing]; st.Scheduled != 1 || st.Ready != 0 || st.Leased != 1 {
		t.Fatalf("stats %+v: want 1 scheduled, 1 leased (%s)", st, b.ID)
	}
}

func testRequeueAfter(t *testing.T, h Harness) {
	m := newMsg("p", sms.ClassOTP)
	q, l := takenAlone(t, h, m)
	due := time.Now().Add(300 * time.Millisecond)
	if err := q.Requeue(t.Context(), l, queue.RequeueOptions{After: 300 * time.Millisecond}); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	if got := takeWhenDue(t, q, opts(), due).Message.ID; got != m.ID {
		t.Fatalf("took %s, want %s", got, m.ID)
	}
}

func testComplete(t *testing.T, h Harness) {
	for _, o := range []queue.Outcome{
		{Status: sms.StatusSent, ProviderID: "pm-42", Attempts: 2},
		{Status: sms.StatusFailed, Reason: "invalid number", Attempts: 1},
		{Status: sms.StatusExpired, Reason: "ttl passed", Attempts: 3},
	} {
		t.Run(string(o.Status), func(t *testing.T) {
			t.Parallel()
			q := h.New(t)
			ctx := t.Context()
			m := newMsg("p", sms.ClassTransactional)
			mustEnqueue(t, q, m)
			l := mustTake(t, q, opts())
			if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusQueued}); err == nil {
				t.Fatal("Complete with a non-terminal status: no error")
			}
			wantStatus(t, q, m.ID, sms.StatusSending)
			if err := q.Complete(ctx, l, o); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			got := wantStatus(t, q, m.ID, o.Status)
			if got.Attempts != o.Attempts || got.ProviderID != o.ProviderID || got.LastError != o.Reason || got.Dead {
				t.Fatalf("Get = %+v, want outcome %+v", got, o)
			}
			if o.Status == sms.StatusSent && got.SentAt.IsZero() {
				t.Fatal("sent without SentAt")
			}
			// Status never goes back.
			allLost(t, q, l)
			again := wantStatus(t, q, m.ID, o.Status)
			if again.Attempts != o.Attempts || again.ProviderID != o.ProviderID || again.LastError != o.Reason {
				t.Fatalf("a stale ack changed the message: %+v", again)
			}
			wantEnded(t, q, m.ID, "completed")
		})
	}
}

func testDeadLetters(t *testing.T, h Harness) {
	q, a, b, l := firstTaken(t, h, sms.ClassTransactional)
	ctx := t.Context()
	if err := q.Dead(ctx, l, "gave up after 5", 5); err != nil {
		t.Fatalf("Dead: %v", err)
	}
	m := wantStatus(t, q, a.ID, sms.StatusFailed)
	if !m.Dead || m.Attempts != 5 || m.LastError != "gave up after 5" {
		t.Fatalf("dead letter %+v", m)
	}
	allLost(t, q, l)
	dl, err := q.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatalf("DeadLetters: %v", err)
	}
	if got := ids(dl); !slices.Equal(got, []string{a.ID}) {
		t.Fatalf("DeadLetters = %v, want [%s]", got, a.ID)
	}
	if st := stats(t, q)[sms.ClassTransactional]; st.Dead != 1 || st.Ready != 1 {
		t.Fatalf("stats %+v: want 1 dead, 1 ready", st)
	}
	if n := outstanding(t, q, "p"); n != 1 {
		t.Fatalf("Outstanding = %d, want 1 (dead letters are not outstanding)", n)
	}
	if err := q.RetryDead(ctx, b.ID); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("RetryDead of a queued message: %v, want ErrNotFound", err)
	}
	if err := q.RetryDead(ctx, sms.NewID(time.Now())); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("RetryDead of an unknown id: %v, want ErrNotFound", err)
	}
	if err := q.RetryDead(ctx, a.ID); err != nil {
		t.Fatalf("RetryDead: %v", err)
	}
	m = wantStatus(t, q, a.ID, sms.StatusQueued)
	if m.Dead || m.Attempts != 0 {
		t.Fatalf("retried dead letter %+v: want attempts reset, not dead", m)
	}
	if err := q.RetryDead(ctx, a.ID); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("second RetryDead: %v, want ErrNotFound", err)
	}
	if dl, err := q.DeadLetters(ctx, 10); err != nil || len(dl) != 0 {
		t.Fatalf("DeadLetters after retry = %v, %v: want none", ids(dl), err)
	}
	if n := outstanding(t, q, "p"); n != 2 {
		t.Fatalf("Outstanding = %d, want 2", n)
	}
	got := []string{mustTake(t, q, opts()).Message.ID, mustTake(t, q, opts()).Message.ID}
	slices.Sort(got)
	want := []string{a.ID, b.ID}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("took %v, want %v", got, want)
	}

	// The limit is honoured.
	for range 3 {
		m := newMsg("p", sms.ClassMarketing)
		mustEnqueue(t, q, m)
		if err := q.Dead(ctx, mustTake(t, q, opts(sms.ClassMarketing)), "x", 1); err != nil {
			t.Fatalf("Dead: %v", err)
		}
	}
	if dl, err := q.DeadLetters(ctx, 2); err != nil || len(dl) != 2 {
		t.Fatalf("DeadLetters(2) = %d, %v: want 2", len(dl), err)
	}
}

func testStats(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	for _, c := range sms.Classes {
		if st := stats(t, q)[c]; st != (queue.ClassStats{}) {
			t.Fatalf("empty queue, %s: %+v", c, st)
		}
	}
	before := time.Now()
	mustEnqueue(t, q, newMsg("p", sms.ClassOTP), newMsg("p", sms.ClassOTP))
	sched := newMsg("p", sms.ClassOTP)
	sched.NotBefore = time.Now().Add(time.Hour)
	mustEnqueue(t, q, sched)
	mustEnqueue(t, q, newMsg("p", sms.ClassMarketing), newMsg("p", sms.ClassMarketing), newMsg("p", sms.ClassMarketing))
	mustTake(t, q, opts(sms.ClassMarketing))
	mustEnqueue(t, q, newMsg("p", sms.ClassTransactional))
	if err := q.Dead(ctx, mustTake(t, q, opts(sms.ClassTransactional)), "x", 1); err != nil {
		t.Fatalf("Dead: %v", err)
	}
	// Let the queued messages age measurably (a lower bound only).
	time.Sleep(50 * time.Millisecond)
	st := stats(t, q)
	upper := time.Since(before) + slack
	check := func(c sms.Class, ready, scheduled, leased, dead int64) {
		t.Helper()
		s := st[c]
		if s.Ready != ready || s.Scheduled != scheduled || s.Leased != leased || s.Dead != dead {
			t.Fatalf("%s: %+v, want ready %d scheduled %d leased %d dead %d", c, s, ready, scheduled, leased, dead)
		}
		if ready > 0 && (s.OldestAge < 50*time.Millisecond-slack || s.OldestAge > upper) {
			t.Fatalf("%s: oldest age %v, want between 50ms and %v", c, s.OldestAge, upper)
		}
		if ready == 0 && s.OldestAge != 0 {
			t.Fatalf("%s: oldest age %v with nothing ready", c, s.OldestAge)
		}
	}
	check(sms.ClassOTP, 2, 1, 0, 0)
	check(sms.ClassTransactional, 0, 0, 0, 1)
	check(sms.ClassMarketing, 2, 0, 1, 0)
}

// testScheduledWithin: messages not yet due are counted by class under
// every horizon that reaches their not-before; ready, leased and dead
// messages are not counted.
func testScheduledWithin(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	at := func(c sms.Class, after time.Duration) *sms.Message {
		m := newMsg("p", c)
		m.NotBefore = time.Now().Add(after)
		return m
	}
	mustEnqueue(t, q, newMsg("p", sms.ClassMarketing), at(sms.ClassMarketing, time.Minute),
		at(sms.ClassMarketing, 10*time.Minute), at(sms.ClassMarketing, 10*time.Minute), at(sms.ClassMarketing, 5*time.Hour),
		at(sms.ClassOTP, 2*time.Hour), newMsg("p", sms.ClassTransactional))
	mustTake(t, q, opts(sms.ClassTransactional))
	horizons := []time.Duration{30 * time.Second, 5 * time.Minute, time.Hour, 3 * time.Hour, 24 * time.Hour}
	got, err := q.ScheduledWithin(ctx, horizons)
	if err != nil {
		t.Fatalf("ScheduledWithin: %v", err)
	}
	want := map[sms.Class][]int64{
		sms.ClassOTP:           {0, 0, 0, 1, 1},
		sms.ClassTransactional: {0, 0, 0, 0, 0},
		sms.ClassMarketing:     {0, 1, 3, 3, 4},
	}
	for _, c := range sms.Classes {
		if !slices.Equal(got[c], want[c]) {
			t.Errorf("%s: %v, want %v (horizons %v)", c, got[c], want[c], horizons)
		}
	}
	for _, bad := range [][]time.Duration{nil, {time.Hour, time.Minute}, {-time.Second}, make([]time.Duration, queue.MaxHorizons+1)} {
		if _, err := q.ScheduledWithin(ctx, bad); err == nil {
			t.Errorf("horizons %v accepted", bad)
		}
	}
}

func testOutstanding(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	mustEnqueue(t, q, newMsg("p1", sms.ClassMarketing), newMsg("p1", sms.ClassMarketing), newMsg("p1", sms.ClassMarketing), newMsg("p2", sms.ClassOTP))
	want := func(p string, n int64) {
		t.Helper()
		if got := outstanding(t, q, p); got != n {
			t.Fatalf("Outstanding(%s) = %d, want %d", p, got, n)
		}
	}
	want("p1", 3)
	want("p2", 1)
	want("nobody", 0)
	l := mustTake(t, q, opts(sms.ClassMarketing))
	want("p1", 3) // in flight still counts
	if err := q.Requeue(ctx, l, queue.RequeueOptions{After: time.Hour}); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	want("p1", 3) // scheduled still counts
	l = mustTake(t, q, opts(sms.ClassMarketing))
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, Attempts: 1}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	want("p1", 2)
	l = mustTake(t, q, opts(sms.ClassMarketing))
	if err := q.Dead(ctx, l, "x", 3); err != nil {
		t.Fatalf("Dead: %v", err)
	}
	want("p1", 1)
	if err := q.RetryDead(ctx, l.Message.ID); err != nil {
		t.Fatalf("RetryDead: %v", err)
	}
	want("p1", 2)
	want("p2", 1)
}

// drain runs takers goroutines over handles until every message is taken,
// completing each, and checks each id came out exactly once.
func drain(t *testing.T, handles []queue.Queue, takers int, enqueued func() bool, want map[string]bool) {
	t.Helper()
	var (
		mu    sync.Mutex
		seen  = map[string]int{}
		wg    sync.WaitGroup
		fails atomic.Int64
	)
	ctx := t.Context()
	deadline := time.Now().Add(3 * patience)
	for i := range takers {
		q := handles[i%len(handles)]
		wg.Go(func() {
			for time.Now().Before(deadline) {
				done := enqueued()
				l, _, err := q.Take(ctx, queue.TakeOptions{Owner: fmt.Sprintf("taker-%d", i), Lease: time.Hour})
				if errors.Is(err, queue.ErrEmpty) {
					if done {
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					t.Errorf("taker %d: Take: %v", i, err)
					fails.Add(1)
					return
				}
				mu.Lock()
				seen[l.Message.ID]++
				mu.Unlock()
				if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, Attempts: 1}); err != nil {
					t.Errorf("taker %d: Complete %s: %v", i, l.Message.ID, err)
					fails.Add(1)
					return
				}
			}
			t.Errorf("taker %d: not drained within %v", i, 3*patience)
		})
	}
	wg.Wait()
	if fails.Load() > 0 {
		t.FailNow()
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s taken %d times", id, n)
		}
		if !want[id] {
			t.Errorf("%s taken but never enqueued", id)
		}
	}
	for id := range want {
		if seen[id] == 0 {
			t.Errorf("%s never taken", id)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

const concurrentMessages = 2000

func testConcurrentTakers(t *testing.T, h Harness) {
	q := h.New(t)
	want := map[string]bool{}
	for start := 0; start < concurrentMessages; start += 250 {
		batch := make([]*sms.Message, 250)
		for i := range batch {
			batch[i] = newMsg(fmt.Sprintf("p%d", i%3), sms.Classes[i%3])
			want[batch[i].ID] = true
		}
		if _, err := q.EnqueueMany(t.Context(), batch); err != nil {
			t.Fatalf("EnqueueMany: %v", err)
		}
	}
	drain(t, []queue.Queue{q}, 8, func() bool { return true }, want)
	mustEmpty(t, q, opts())
	for _, c := range sms.Classes {
		if st := stats(t, q)[c]; st.Ready != 0 || st.Leased != 0 || st.Scheduled != 0 {
			t.Fatalf("%s after drain: %+v", c, st)
		}
	}
	for p := range 3 {
		if n := outstanding(t, q, fmt.Sprintf("p%d", p)); n != 0 {
			t.Fatalf("Outstanding(p%d) = %d after drain", p, n)
		}
	}
}

// testConcurrentMultiClient enqueues and takes at the same time over several
// handles on one storage.
func testConcurrentMultiClient(t *testing.T, h Harness) {
	q := h.New(t)
	handles := handlesOn(t, h, q, 3)
	const producers = 4
	want := map[string]bool{}
	batches := make([][]*sms.Message, producers)
	for p := range producers {
		for i := range concurrentMessages / producers {
			m := newMsg(fmt.Sprintf("p%d", p), sms.Classes[i%3])
			batches[p] = append(batches[p], m)
			want[m.ID] = true
		}
	}
	var (
		enqueued atomic.Bool
		wg       sync.WaitGroup
	)
	for p, ms := range batches {
		q := handles[p%len(handles)]
		wg.Go(func() {
			for start := 0; start < len(ms); start += 50 {
				rs, err := q.EnqueueMany(t.Context(), ms[start:min(start+50, len(ms))])
				if err != nil {
					t.Errorf("EnqueueMany: %v", err)
					return
				}
				for _, r := range rs {
					if r.Err != nil || r.Existed {
						t.Errorf("EnqueueMany item: %+v", r)
					}
				}
			}
		})
	}
	go func() {
		wg.Wait()
		enqueued.Store(true)
	}()
	drain(t, handles, 8, enqueued.Load, want)
	for _, hq := range handles {
		mustEmpty(t, hq, opts())
	}
}

func testDurability(t *testing.T, h Harness) {
	if h.Reopen == nil {
		t.Skip("backend has no Reopen")
	}
	q := h.New(t)
	ctx := t.Context()
	var all []*sms.Message
	for i := range 100 {
		m := newMsg("p", sms.Classes[i%3])
		if i%10 == 0 {
			m.IdempotencyKey = fmt.Sprintf("key-%d", i)
		}
		all = append(all, m)
	}
	mustEnqueue(t, q, all[:50]...)
	if _, err := q.EnqueueMany(ctx, all[50:]); err != nil {
		t.Fatalf("EnqueueMany: %v", err)
	}
	status := map[string]sms.Status{}
	for _, m := range all {
		status[m.ID] = sms.StatusQueued
	}
	var leased []string
	for i := range 15 {
		l := mustTake(t, q, queue.TakeOptions{Owner: "w", Lease: 300 * time.Millisecond})
		var err error
		switch {
		case i < 5:
			err = q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm", Attempts: 1})
			status[l.Message.ID] = sms.StatusSent
		case i < 7:
			err = q.Dead(ctx, l, "x", 3)
			status[l.Message.ID] = sms.StatusFailed
		default:
			status[l.Message.ID] = sms.StatusSending
			leased = append(leased, l.Message.ID)
		}
		if err != nil {
			t.Fatalf("ack: %v", err)
		}
	}
	q = h.Reopen(t, q)
	for _, m := range all {
		got := wantStatus(t, q, m.ID, status[m.ID])
		body, to := m.Body, m.To
		if status[m.ID] == sms.StatusSent {
			body, to = "", sms.MaskPhone(m.To) // a final record
		}
		if got.Body != body || got.To != to || got.Class != m.Class {
			t.Fatalf("after reopen %s = %+v, want %+v", m.ID, got, m)
		}
	}
	replay := newMsg("p", sms.ClassOTP)
	replay.IdempotencyKey = "key-10"
	if res, err := q.Enqueue(ctx, replay); err != nil || !res.Existed || res.Message.ID != all[10].ID {
		t.Fatalf("replay after reopen = %+v, %v: want Existed %s", res, err, all[10].ID)
	}
	if n := outstanding(t, q, "p"); n != 93 {
		t.Fatalf("Outstanding after reopen = %d, want 93", n)
	}
	if dl, err := q.DeadLetters(ctx, 10); err != nil || len(dl) != 2 {
		t.Fatalf("DeadLetters after reopen: %d, %v: want 2", len(dl), err)
	}
	recoverAll(t, q, len(leased))
	if taken := takeAllUnsent(t, q, status); taken != 93 {
		t.Fatalf("took %d after reopen, want 93 (85 queued + 8 recovered)", taken)
	}
}

// takeAllUnsent takes every message left in q, failing on one whose status
// (as the test tracked it) was neither queued nor sending, and counts them.
func takeAllUnsent(t *testing.T, q queue.Queue, status map[string]sms.Status) int {
	t.Helper()
	var taken int
	for {
		l, _, err := q.Take(t.Context(), opts())
		if errors.Is(err, queue.ErrEmpty) {
			return taken
		}
		if err != nil {
			t.Fatalf("Take: %v", err)
		}
		if status[l.Message.ID] != sms.StatusQueued && status[l.Message.ID] != sms.StatusSending {
			t.Fatalf("took %s, which was %s", l.Message.ID, status[l.Message.ID])
		}
		status[l.Message.ID] = "taken"
		taken++
	}
}

func testContextCancelled(t *testing.T, h Harness) {
	m := newMsg("p", sms.ClassOTP)
	q, l := takenAlone(t, h, m)
	ctx := canceled()
	start := time.Now()
	calls := everyMethod(ctx, t, q, m, l)
	if d := time.Since(start); d > patience/4 {
		t.Errorf("cancelled calls took %v", d)
	}
	for name, err := range calls {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: %v, want context.Canceled", name, err)
		}
	}
	// The lease was not touched by the cancelled acks.
	if err := q.Complete(t.Context(), l, queue.Outcome{Status: sms.StatusSent, Attempts: 1}); err != nil {
		t.Fatalf("Complete after cancelled calls: %v", err)
	}
}

// everyMethod calls every method of q but Close with ctx, on m, which q
// holds, and l, its lease, and returns each call's error by the method's
// name. It fails the test when queue.Queue has a method it does not call.
func everyMethod(ctx context.Context, t *testing.T, q queue.Queue, m *sms.Message, l *queue.Leased) map[string]error {
	t.Helper()
	calls := map[string]error{}
	_, calls["Enqueue"] = q.Enqueue(ctx, newMsg("p", sms.ClassOTP))
	_, calls["EnqueueMany"] = q.EnqueueMany(ctx, []*sms.Message{newMsg("p", sms.ClassOTP)})
	_, _, calls["Take"] = q.Take(ctx, opts())
	_, calls["TakeMore"] = q.TakeMore(ctx, opts(), 2, 2)
	calls["Extend"] = q.Extend(ctx, l, time.Hour)
	calls["Complete"] = q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, Attempts: 1})
	calls["Requeue"] = q.Requeue(ctx, l, queue.RequeueOptions{})
	calls["Dead"] = q.Dead(ctx, l, "x", 1)
	_, calls["ApplyReceipt"] = q.ApplyReceipt(ctx, queue.Receipt{Reference: m.ID, Status: sms.StatusDelivered})
	sent := *m
	sent.Status, sent.Attempts, sent.SentAt, sent.UpdatedAt = sms.StatusSent, 1, time.Now(), time.Now()
	_, calls["RecordSent"] = q.RecordSent(ctx, &sent)
	_, calls["Cancel"] = q.Cancel(ctx, m.ID, "p")
	_, calls["Recover"] = q.Recover(ctx)
	_, calls["DeadLetters"] = q.DeadLetters(ctx, 10)
	calls["RetryDead"] = q.RetryDead(ctx, m.ID)
	_, calls["Get"] = q.Get(ctx, m.ID)
	_, calls["Stats"] = q.Stats(ctx)
	_, calls["Outstanding"] = q.Outstanding(ctx, "p")
	_, calls["ScheduledWithin"] = q.ScheduledWithin(ctx, []time.Duration{time.Hour})
	if want := reflect.TypeFor[queue.Queue]().NumMethod() - 1; len(calls) != want {
		t.Errorf("everyMethod calls %d methods, queue.Queue has %d besides Close", len(calls), want)
	}
	return calls
}

func testClosed(t *testing.T, h Harness) {
	m := newMsg("p", sms.ClassOTP)
	q, l := takenAlone(t, h, m)
	if err := q.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := t.Context()
	calls := everyMethod(ctx, t, q, m, l)
	for name, err := range calls {
		if !errors.Is(err, queue.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if err := q.Close(); err != nil && !errors.Is(err, queue.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

// testFinalRecord: once completed, a message keeps no body and only its
// masked number, yet Get still answers with everything else; an
// idempotent retry still finds it and an enqueue of its id stores nothing.
func testFinalRecord(t *testing.T, h Harness) {
	m := newMsg("p", sms.ClassTransactional)
	m.Body = "こんにちは secret text"
	m.From = "ACME"
	m.Reference = "order-1"
	m.Segments = 1
	m.IdempotencyKey = "k-final"
	m.RequestHash = "0123456789abcdef0123456789abcdef"
	m.ExpiresAt = m.CreatedAt.Add(time.Hour)
	q, l := takenAlone(t, h, m)
	ctx := t.Context()
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "SM-final", Attempts: 1}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	got := wantStatus(t, q, m.ID, sms.StatusSent)
	if got.Body != "" || got.From != "ACME" || got.To != sms.MaskPhone(m.To) || got.IdempotencyKey != "" {
		t.Fatalf("final message: body %q, from %q, to %q, key %q", got.Body, got.From, got.To, got.IdempotencyKey)
	}
	if got.Class != m.Class || got.Producer != m.Producer || got.Reference != m.Reference || got.ProviderID != "SM-final" ||
		got.Attempts != 1 || got.Segments != 1 || got.Encoding != sms.UCS2 || !got.CreatedAt.Equal(m.CreatedAt.Truncate(time.Millisecond)) ||
		!got.ExpiresAt.Equal(m.ExpiresAt.Truncate(time.Millisecond)) || got.SentAt.IsZero() || got.UpdatedAt.IsZero() ||
		!queue.SameRequest(got.RequestHash, m.RequestHash) || queue.SameRequest(got.RequestHash, "ffff"+m.RequestHash[4:]) {
		t.Fatalf("final message = %+v, from %+v", got, m)
	}
	retry := newMsg("p", sms.ClassTransactional)
	retry.IdempotencyKey = m.IdempotencyKey
	res, err := q.Enqueue(ctx, retry)
	if err != nil || !res.Existed || res.Message.ID != m.ID || res.Message.Status != sms.StatusSent {
		t.Fatalf("retry with the key of a final message = %+v, %v: want it, existed", res, err)
	}
	again := *m
	again.IdempotencyKey = ""
	if res, err := q.EnqueueMany(ctx, []*sms.Message{&again}); err != nil || (res[0].Err == nil && !res[0].Existed) {
		t.Fatalf("enqueue of a final message's id = %+v, %v: stored again", res, err)
	}
	if _, _, err := q.Take(ctx, opts()); !errors.Is(err, queue.ErrEmpty) {
		t.Fatalf("Take after the retries: %v, want ErrEmpty", err)
	}
}

// testTakeMore: TakeMore hands out what Take would, in the same order,
// stopping at max messages or once the units taken reach units; nothing
// ready is no error.
func testTakeMore(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	var ms []*sms.Message
	for i := range 5 {
		m := newMsg("p", sms.ClassMarketing)
		m.Segments = 1 + i%2 // 1, 2, 1, 2, 1
		ms = append(ms, m)
	}
	otp := newMsg("p", sms.ClassOTP)
	mustEnqueue(t, q, ms...)
	mustEnqueue(t, q, otp)
	got, err := q.TakeMore(ctx, opts(sms.ClassMarketing), 10, 3) // 1 + 2 reaches 3
	if err != nil || len(got) != 2 || got[0].Message.ID != ms[0].ID || got[1].Message.ID != ms[1].ID {
		t.Fatalf("TakeMore(10 messages, 3 units) = %v, %v: want the first two marketing", got, err)
	}
	more, err := q.TakeMore(ctx, opts(sms.ClassMarketing), 2, 100)
	if err != nil || len(more) != 2 || more[0].Message.ID != ms[2].ID || more[1].Message.ID != ms[3].ID {
		t.Fatalf("TakeMore(2 messages) = %v, %v: want the next two", more, err)
	}
	for _, l := range append(got, more...) {
		if l.Message.Status != sms.StatusSending || l.Token == "" {
			t.Fatalf("taken %+v", l)
		}
		wantStatus(t, q, l.Message.ID, sms.StatusSending)
	}
	if more[0].Token == more[1].Token {
		t.Fatal("two leases share a token")
	}
	// Each lease is its own: ending one leaves the other held.
	if err := q.Complete(ctx, more[0], queue.Outcome{Status: sms.StatusSent, ProviderID: "pm", Attempts: 1}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if err := q.Requeue(ctx, more[1], queue.RequeueOptions{}); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	if err := q.Complete(ctx, more[1], queue.Outcome{Status: sms.StatusSent, Attempts: 1}); !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("Complete after Requeue: %v, want ErrLeaseLost", err)
	}
	last, err := q.TakeMore(ctx, opts(sms.ClassMarketing), 10, 100)
	if err != nil || len(last) != 2 || last[0].Message.ID != ms[4].ID || last[1].Message.ID != ms[3].ID {
		t.Fatalf("TakeMore = %v, %v: want the last and the requeued one", last, err)
	}
	if none, err := q.TakeMore(ctx, opts(sms.ClassMarketing), 10, 100); err != nil || len(none) != 0 {
		t.Fatalf("TakeMore on an empty class = %v, %v", none, err)
	}
	if l := mustTake(t, q, opts()); l.Message.ID != otp.ID {
		t.Fatalf("took %s, want the OTP left", l.Message.ID)
	}
}

// testCrashes: a requeue marked Crashed counts one crash on the message,
// kept through other requeues and a dead letter, and reset (with the
// attempts) when an operator retries the dead letter.
func testCrashes(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	m := newMsg("p", sms.ClassTransactional)
	mustEnqueue(t, q, m)
	for i := range 2 {
		l := mustTake(t, q, opts())
		if l.Message.Crashes != i {
			t.Fatalf("take %d: Crashes %d, want %d", i, l.Message.Crashes, i)
		}
		if err := q.Requeue(ctx, l, queue.RequeueOptions{Crashed: true, LastError: "crashed"}); err != nil {
			t.Fatalf("Requeue: %v", err)
		}
	}
	l := mustTake(t, q, opts())
	if err := q.Requeue(ctx, l, queue.RequeueOptions{SpendAttempt: true}); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	if got := mustGet(t, q, m.ID); got.Crashes != 2 || got.Attempts != 1 {
		t.Fatalf("after 2 crashes and a retry: crashes %d attempts %d", got.Crashes, got.Attempts)
	}
	l = mustTake(t, q, opts())
	if err := q.Dead(ctx, l, "poison", 1); err != nil {
		t.Fatalf("Dead: %v", err)
	}
	if got := mustGet(t, q, m.ID); got.Crashes != 2 || !got.Dead {
		t.Fatalf("dead letter %+v", got)
	}
	if err := q.RetryDead(ctx, m.ID); err != nil {
		t.Fatalf("RetryDead: %v", err)
	}
	if got := mustGet(t, q, m.ID); got.Crashes != 0 || got.Attempts != 0 {
		t.Fatalf("retried dead letter: crashes %d attempts %d, want 0 and 0", got.Crashes, got.Attempts)
	}
}
