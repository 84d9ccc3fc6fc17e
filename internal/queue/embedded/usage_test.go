package embedded

import (
	"testing"
	"time"

	"smsgw/internal/sms"
)

// A day's usage counters stay while a read may ask for them (the
// retention and two days), then Prune deletes them.
func TestUsagePruned(t *testing.T) {
	clk := newClock()
	q := open(t, Config{Now: clk.Now, Retention: 48 * time.Hour, IdempotencyWindow: 24 * time.Hour})
	ctx := t.Context()
	m := msg("p", sms.ClassTransactional, clk.Now())
	if _, err := q.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		t.Helper()
		rows, err := q.Usage(ctx, []string{"p"}, m.CreatedAt, m.CreatedAt)
		if err != nil {
			t.Fatal(err)
		}
		return len(rows)
	}
	clk.Add(3 * 24 * time.Hour) // within retention + 2 days of its day's end
	if _, err := q.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d rows within the retention, want 1", n)
	}
	clk.Add(2 * 24 * time.Hour)
	if _, err := q.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d rows after the retention, want 0", n)
	}
}
