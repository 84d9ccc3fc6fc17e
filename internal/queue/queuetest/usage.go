package queuetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// Usage (queue/usage.go): every backend counts a message accepted once
// when it stores it and once at the status the queue ended it with, in the
// step that does so; a repeated call that changes nothing counts nothing.

// usageRows is the usage of producers on m's creation day as lines
// "producer class country status messages units".
func usageRows(t *testing.T, q queue.Queue, m *sms.Message, producers ...string) string {
	t.Helper()
	rows, err := facet[queue.UsageReader](t, q).Usage(t.Context(), producers, m.CreatedAt, m.CreatedAt)
	if err != nil {
		t.Fatalf("Usage: %v", err)
	}
	day := queue.UsageDay(m.CreatedAt).Format(queue.UsageDayLayout)
	var b strings.Builder
	for _, r := range rows {
		if r.Day != day {
			t.Errorf("row of day %s, want only %s", r.Day, day)
		}
		fmt.Fprintf(&b, "%s %s %s %s %d %d\n", r.Producer, r.Class, r.Country, r.Status, r.Messages, r.Units)
	}
	return b.String()
}

func testUsageCounts(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	otp := newMsg("a", sms.ClassOTP)
	otp.To = "+999123456789" // no region
	tx := newMsg("a", sms.ClassTransactional)
	mk := newMsg("a", sms.ClassMarketing)
	mk.To, mk.Segments = "+33612345678", 2
	other := newMsg("b", sms.ClassTransactional)
	mustEnqueue(t, q, otp, tx, mk, other)
	// a retried enqueue of a stored id counts nothing
	if res, err := q.Enqueue(ctx, tx); err != nil || !res.Existed {
		t.Fatalf("Enqueue again = %+v, %v; want Existed", res, err)
	}
	l := mustTake(t, q, opts(sms.ClassOTP))
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm-usage-1", Attempts: 1}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	// failed, queued again (the failed end no longer counts), then expired
	l = mustTake(t, q, opts(sms.ClassTransactional))
	if err := q.Dead(ctx, l, "gave up", 3); err != nil {
		t.Fatalf("Dead: %v", err)
	}
	if got, want := usageRows(t, q, tx, "a"), "a transactional JP failed 1 1\n"; !strings.Contains(got, want) {
		t.Fatalf("usage after Dead:\n%s\nwant a line %q", got, want)
	}
	if err := q.RetryDead(ctx, tx.ID); err != nil {
		t.Fatalf("RetryDead: %v", err)
	}
	l = mustTake(t, q, opts(sms.ClassTransactional))
	if l.Message.ID != tx.ID {
		l = mustTake(t, q, opts(sms.ClassTransactional))
	}
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusExpired, Attempts: 0}); err != nil {
		t.Fatalf("Complete expired: %v", err)
	}
	if _, err := q.Cancel(ctx, mk.ID, "a"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if _, err := q.Cancel(ctx, mk.ID, "a"); !errors.Is(err, queue.ErrNotCancelable) {
		t.Fatalf("second Cancel: %v, want ErrNotCancelable", err)
	}
	fast := newMsg("a", sms.ClassOTP)
	fast.ProviderID = "pm-usage-fast"
	for range 2 { // the second stores nothing and counts nothing
		if _, err := q.RecordSent(ctx, fast); err != nil {
			t.Fatalf("RecordSent: %v", err)
		}
	}
	want := "a otp JP accepted 1 1\na otp JP sent 1 1\n" +
		"a otp unknown accepted 1 1\na otp unknown sent 1 1\n" +
		"a transactional JP accepted 1 1\na transactional JP expired 1 1\n" +
		"a marketing FR accepted 1 2\na marketing FR canceled 1 2\n"
	if got := usageRows(t, q, otp, "a"); got != want {
		t.Fatalf("usage of a:\n%s\nwant\n%s", got, want)
	}
	// each producer's own counters; none for a producer not asked for
	if got, want := usageRows(t, q, otp, "b"), "b transactional JP accepted 1 1\n"; got != want {
		t.Fatalf("usage of b:\n%s\nwant\n%s", got, want)
	}
	if got := usageRows(t, q, otp, "c"); got != "" {
		t.Fatalf("usage of a producer with no messages:\n%s", got)
	}
	all := usageRows(t, q, otp, "a", "b")
	if all != want+"b transactional JP accepted 1 1\n" {
		t.Fatalf("usage of a and b:\n%s", all)
	}
	// days outside the range are not read
	rows, err := facet[queue.UsageReader](t, q).Usage(ctx, []string{"a"}, otp.CreatedAt.AddDate(0, 0, -3), otp.CreatedAt.AddDate(0, 0, -1))
	if err != nil || len(rows) != 0 {
		t.Fatalf("usage of earlier days = %v, %v; want none", rows, err)
	}
}

// A take that ends a message suppressed counts it suppressed.
func testUsageSuppressed(t *testing.T, h Harness) {
	q, l, id, m := oneNumbered(t, h)
	l.add(id)
	deadline := time.Now().Add(5 * time.Second)
	for len(l.endedIDs(t)) == 0 && time.Now().Before(deadline) {
		if _, _, err := q.Take(t.Context(), l.opts(false, sms.ClassTransactional)); err != nil && !errors.Is(err, queue.ErrEmpty) {
			t.Fatalf("Take: %v", err)
		}
	}
	if got, want := usageRows(t, q, m, "p"), "p transactional JP accepted 1 1\np transactional JP suppressed 1 1\n"; got != want {
		t.Fatalf("usage:\n%s\nwant\n%s", got, want)
	}
}
