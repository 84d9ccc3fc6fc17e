package queuetest

import (
	"errors"
	"sync"
	"testing"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// Producer budgets (queue/budget.go), the same in every backend:
//
//   - An enqueue decides a message's budget charge with the store: a message
//     whose units would take a period past its limit is refused (its
//     EnqueueResult.Err an *OverBudget naming the period) and charges
//     nothing; a batch stores the items that fit, in order; a retried
//     enqueue of a stored id charges nothing again.
//   - Concurrent enqueues from many handles never take a period past its
//     limit.
//   - Cancel, and Complete with expired or suppressed, give the units back
//     to the periods the message was charged to; sent and Dead do not.
//   - Charging a new period of a kind drops the producer's previous one:
//     its count reads 0 and a give-back to it changes nothing.
//   - ChargeBudget and RefundBudget (an OTP) do the same outside an enqueue.

// charged is a new message of producer "p" costing units against a daily
// limit of day (period id d1) and no monthly limit (period m1).
func charged(units int, day int64) *sms.Message {
	m := newMsg("p", sms.ClassTransactional)
	m.Budget = sms.Budget{Units: units, Day: sms.BudgetPeriod{ID: "d1", Limit: day}, Month: sms.BudgetPeriod{ID: "m1"}}
	return m
}

func budgets(t *testing.T, q queue.Queue) queue.Budgets {
	t.Helper()
	return facet[queue.Budgets](t, q)
}

// wantUsed checks the counts of producer "p"'s periods d1 and m1.
func wantUsed(t *testing.T, q queue.Queue, day, month int64) {
	t.Helper()
	got, err := budgets(t, q).BudgetUsed(t.Context(), "p", []string{"d1", "m1"})
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != day || got[1] != month {
		t.Fatalf("budget used day %d, month %d; want %d, %d", got[0], got[1], day, month)
	}
}

func wantOver(t *testing.T, err error, period string, used int64) {
	t.Helper()
	var ob *queue.OverBudget
	if !errors.As(err, &ob) || ob.Period != period || ob.Used != used {
		t.Fatalf("err %v; want over the %s budget with %d used", err, period, used)
	}
}

func testBudgetChargedWithStore(t *testing.T, h Harness) {
	q := h.New(t)
	a, b := charged(2, 5), charged(2, 5)
	mustEnqueue(t, q, a, b)
	wantUsed(t, q, 4, 4)
	_, err := q.Enqueue(t.Context(), charged(2, 5))
	wantOver(t, err, "daily", 4)
	wantUsed(t, q, 4, 4)
	// a retried enqueue of a stored id charges nothing again
	if res, err := q.Enqueue(t.Context(), a); err != nil || !res.Existed {
		t.Fatalf("enqueue again: %+v, %v", res, err)
	}
	wantUsed(t, q, 4, 4)
	// a batch stores the items that fit, in order
	batch := []*sms.Message{charged(2, 7), charged(1, 7), charged(1, 7), charged(1, 7)}
	res, err := q.EnqueueMany(t.Context(), batch)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("items that fit refused: %v, %v", res[0].Err, res[1].Err)
	}
	wantOver(t, res[2].Err, "daily", 7)
	wantOver(t, res[3].Err, "daily", 7)
	wantUsed(t, q, 7, 7)
	// the monthly limit refuses as the daily one does
	m := charged(1, 0)
	m.Budget.Month.Limit = 7
	_, err = q.Enqueue(t.Context(), m)
	wantOver(t, err, "monthly", 7)
	if _, err := q.Get(t.Context(), m.ID); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("a refused message was stored: %v", err)
	}
}

func testBudgetGivenBack(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	ms := make([]*sms.Message, 5)
	for i := range ms {
		ms[i] = charged(i+1, 100) // 1..5 units, 15 in all
	}
	mustEnqueue(t, q, ms...)
	wantUsed(t, q, 15, 15)
	if _, err := q.Cancel(ctx, ms[0].ID, "p"); err != nil {
		t.Fatal(err)
	}
	wantUsed(t, q, 14, 14)
	for i, st := range []sms.Status{sms.StatusExpired, sms.StatusSuppressed, sms.StatusSent} {
		l := mustTake(t, q, opts(sms.ClassTransactional))
		if l.Message.ID != ms[i+1].ID || l.Message.Budget.Units != i+2 {
			t.Fatalf("took %s with %+v; want %s with %d units", l.Message.ID, l.Message.Budget, ms[i+1].ID, i+2)
		}
		if err := q.Complete(ctx, l, queue.Outcome{Status: st, Attempts: 1}); err != nil {
			t.Fatal(err)
		}
	}
	wantUsed(t, q, 14-2-3, 14-2-3) // expired and suppressed gave back, sent did not
	l := mustTake(t, q, opts(sms.ClassTransactional))
	if err := q.Dead(ctx, l, "rejected", 1); err != nil {
		t.Fatal(err)
	}
	wantUsed(t, q, 9, 9)
}

func testBudgetConcurrent(t *testing.T, h Harness) {
	q := h.New(t)
	handles := handlesOn(t, h, q, 3)
	const limit = 60
	var mu sync.Mutex
	stored := 0
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				units := 1 + (w+i)%2
				_, err := handles[w%len(handles)].Enqueue(t.Context(), charged(units, limit))
				var ob *queue.OverBudget
				switch {
				case errors.As(err, &ob) && units == 1:
					return
				case errors.As(err, &ob):
				case err != nil:
					t.Error(err)
					return
				default:
					mu.Lock()
					stored += units
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if stored != limit {
		t.Fatalf("stored %d units against a limit of %d", stored, limit)
	}
	wantUsed(t, q, limit, limit)
}

func testBudgetNextPeriod(t *testing.T, h Harness) {
	q := h.New(t)
	first := charged(3, 10)
	mustEnqueue(t, q, first)
	next := charged(2, 10)
	next.Budget.Day.ID = "d2"
	mustEnqueue(t, q, next)
	got, err := budgets(t, q).BudgetUsed(t.Context(), "p", []string{"d1", "d2", "m1"})
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 0 || got[1] != 2 || got[2] != 5 {
		t.Fatalf("counts d1, d2, m1 = %v; want the previous day dropped: 0, 2, 5", got)
	}
	// the first message's day is over: its give-back reaches the month only
	if _, err := q.Cancel(t.Context(), first.ID, "p"); err != nil {
		t.Fatal(err)
	}
	got, err = budgets(t, q).BudgetUsed(t.Context(), "p", []string{"d1", "d2", "m1"})
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 0 || got[1] != 2 || got[2] != 2 {
		t.Fatalf("after the cancel d1, d2, m1 = %v; want 0, 2, 2", got)
	}
}

func testBudgetOutsideEnqueue(t *testing.T, h Harness) {
	q := h.New(t)
	b := budgets(t, q)
	charge := charged(3, 5).Budget
	if err := b.ChargeBudget(t.Context(), "p", charge); err != nil {
		t.Fatal(err)
	}
	wantOver(t, b.ChargeBudget(t.Context(), "p", charge), "daily", 3)
	mustEnqueue(t, q, charged(2, 5)) // the enqueue shares the count
	wantUsed(t, q, 5, 5)
	if err := b.RefundBudget(t.Context(), "p", charge); err != nil {
		t.Fatal(err)
	}
	wantUsed(t, q, 2, 2)
	if err := b.RefundBudget(t.Context(), "p", charge); err != nil {
		t.Fatal(err)
	}
	wantUsed(t, q, 0, 0) // never below 0
}
