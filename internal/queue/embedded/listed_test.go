package embedded

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
)

// TestTakeListUnreadable: when the suppression list cannot be read
// (Suppression.Listed fails), no message it would have checked is handed
// out unchecked. A take that took nothing fails with the error and leaves
// the message queued in its place, nothing ended; once the list answers
// the same message is taken. A TakeMore that took some before the failure
// returns those and leaves the rest queued.
func TestTakeListUnreadable(t *testing.T) {
	t.Parallel()
	q := open(t, Config{})
	ctx := t.Context()
	var down atomic.Bool
	down.Store(true)
	errDown := errors.New("protection.db: input/output error")
	var asked atomic.Int64
	sup := &queue.Suppression{
		Listed: func(_ context.Context, ids []string) ([]bool, error) {
			asked.Add(1)
			if down.Load() {
				return nil, errDown
			}
			return make([]bool, len(ids)), nil
		},
		Ended: func(m *sms.Message) { t.Errorf("ended %s while the list was down", m.ID) },
	}
	o := queue.TakeOptions{Owner: "t", Lease: time.Hour, Suppression: sup}
	var ms []*sms.Message
	for i := range 3 {
		m := smstest.Message("p", sms.ClassMarketing)
		m.NumberID = []string{"aa", "bb", "cc"}[i] + "0123456789abcdef0123456789abcd"
		ms = append(ms, m)
	}
	if _, err := q.EnqueueMany(ctx, ms); err != nil {
		t.Fatal(err)
	}
	if l, _, err := q.Take(ctx, o); !errors.Is(err, errDown) || l != nil {
		t.Fatalf("Take with the list down = %v, %v; want the list's error and nothing", l, err)
	}
	if more, err := q.TakeMore(ctx, o, 3, 3); !errors.Is(err, errDown) || len(more) != 0 {
		t.Fatalf("TakeMore with the list down = %d, %v; want the list's error and nothing", len(more), err)
	}
	if st := mustStats(t, q)[sms.ClassMarketing]; st.Ready != 3 || st.Leased != 0 {
		t.Fatalf("Stats = %+v; want all three still queued", st)
	}
	// An OTP is not checked (Suppression.OTP false): the list is not asked.
	otp := smstest.Message("p", sms.ClassOTP)
	otp.NumberID = "dd0123456789abcdef0123456789abcd"
	if _, err := q.Enqueue(ctx, otp); err != nil {
		t.Fatal(err)
	}
	before := asked.Load()
	if l, _, err := q.Take(ctx, o); err != nil || l.Message.ID != otp.ID || asked.Load() != before {
		t.Fatalf("Take of an OTP with the list down = %v, %v (asked %d times more)", l, err, asked.Load()-before)
	}

	// The list answers again: the first message in line comes out first.
	down.Store(false)
	l, _, err := q.Take(ctx, o)
	if err != nil || l.Message.ID != ms[0].ID {
		t.Fatalf("Take once the list answers = %v, %v; want %s", l, err, ms[0].ID)
	}
	// It fails again after one message of a batch: that one is returned.
	n := 0
	sup.Listed = func(_ context.Context, ids []string) ([]bool, error) {
		if n++; n > 1 {
			return nil, errDown
		}
		return make([]bool, len(ids)), nil
	}
	more, err := q.TakeMore(ctx, o, 2, 2)
	if err != nil || len(more) != 1 || more[0].Message.ID != ms[1].ID {
		t.Fatalf("TakeMore failing after one = %d, %v; want %s alone", len(more), err, ms[1].ID)
	}
	if m, err := q.Get(ctx, ms[2].ID); err != nil || m.Status != sms.StatusQueued {
		t.Fatalf("the message asked about: %+v, %v; want it still queued", m, err)
	}
}

func mustStats(t *testing.T, q *Queue) map[sms.Class]queue.ClassStats {
	t.Helper()
	st, err := q.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return st
}
