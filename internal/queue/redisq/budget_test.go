package redisq

import (
	"maps"
	"slices"
	"testing"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
)

// TestBudgetHashState: the enqueue script keeps a producer's budget counts
// as fields of the account's budget HASH, its current day and month and a
// field naming each, and drops the previous period's count when it charges
// the next; a refused message writes nothing.
func TestBudgetHashState(t *testing.T) {
	t.Parallel()
	q := newShared(t)
	ctx := t.Context()
	enqueue := func(units int, day string) error {
		m := smstest.Message("p", sms.ClassMarketing)
		m.Budget = sms.Budget{Units: units, Day: sms.BudgetPeriod{ID: day, Limit: 5}, Month: sms.BudgetPeriod{ID: "m202612"}}
		_, err := q.Enqueue(ctx, m)
		return err
	}
	want := func(what string, fields map[string]string) {
		t.Helper()
		got, err := q.c.HGetAll(ctx, q.k.budget()).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, fields) {
			t.Fatalf("%s: budget HASH %q; want %q", what, got, fields)
		}
	}
	f := queue.BudgetField
	if err := enqueue(2, "d20261207"); err != nil {
		t.Fatal(err)
	}
	if err := enqueue(2, "d20261207"); err != nil {
		t.Fatal(err)
	}
	state := map[string]string{f("p", "d20261207"): "4", f("p", "m202612"): "4", "p\x1fd": "d20261207", "p\x1fm": "m202612"}
	want("two charges", state)
	before := dump(t, q)
	if err := enqueue(2, "d20261207"); err == nil {
		t.Fatal("a message over the daily limit was stored")
	}
	if after := dump(t, q); !slices.Equal(before, after) {
		t.Fatalf("a budget refusal wrote:\n%v\nwas\n%v", after, before)
	}
	if err := enqueue(3, "d20261208"); err != nil {
		t.Fatal(err)
	}
	want("the next day", map[string]string{f("p", "d20261208"): "3", f("p", "m202612"): "7", "p\x1fd": "d20261208", "p\x1fm": "m202612"})
}
