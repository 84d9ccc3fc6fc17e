package queuetest

import (
	"errors"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// ShelfHarness reaches a backend that implements queue.Shelver.
type ShelfHarness struct {
	// New returns a queue over fresh, empty storage (as Harness.New).
	New func(t *testing.T) queue.Queue
	// Pause pauses (on) or lifts the pause of producer beside q's storage,
	// as the gateway does, and returns the Shelf a set-aside is given.
	Pause func(t *testing.T, q queue.Queue, producer string, on bool) queue.Shelf
}

// RunShelf runs the set-aside cases: a paused producer's messages leave
// the line once and a take no longer meets them, another producer's flow
// past them, Restore puts them back in their order (dropping one canceled
// meanwhile), and a set-aside after the pause was lifted puts the message
// straight back in line.
func RunShelf(t *testing.T, h ShelfHarness) {
	t.Run("SetAsideAndRestore", func(t *testing.T) {
		t.Parallel()
		q := h.New(t)
		sv := q.(queue.Shelver)
		ctx := t.Context()
		var ids []string
		for _, p := range []string{"a", "b", "a", "a"} {
			m := newMsg(p, sms.ClassMarketing)
			if _, err := q.Enqueue(ctx, m); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, m.ID)
		}
		sh := h.Pause(t, q, "a", true)
		opt := queue.TakeOptions{Owner: "t", Lease: time.Minute}
		var sent []string
		for range 4 {
			l, _, err := q.Take(ctx, opt)
			if err != nil {
				t.Fatal(err)
			}
			if l.Message.Producer == "a" {
				if err := sv.SetAside(ctx, l, sh); err != nil {
					t.Fatal(err)
				}
				continue
			}
			sent = append(sent, l.Message.ID)
			if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, Attempts: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if len(sent) != 1 || sent[0] != ids[1] {
			t.Fatalf("sent %v, want b's message %s alone", sent, ids[1])
		}
		if _, _, err := q.Take(ctx, opt); !errors.Is(err, queue.ErrEmpty) {
			t.Fatalf("a take met a shelved message: %v", err)
		}
		st, err := q.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r := st[sms.ClassMarketing].Ready; r != 3 {
			t.Fatalf("marketing ready %d with 3 on the shelf, want 3", r)
		}
		if n, err := q.Outstanding(ctx, "a"); err != nil || n != 3 {
			t.Fatalf("outstanding of a: %d, %v; want 3", n, err)
		}
		if _, err := q.Cancel(ctx, ids[2], "a"); err != nil {
			t.Fatalf("cancel a shelved message: %v", err)
		}
		h.Pause(t, q, "a", false)
		total := 0
		for {
			n, err := sv.Restore(ctx, "a", 1)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			total += n
		}
		if total != 3 {
			t.Fatalf("restored %d, want 3 (one dropped as canceled)", total)
		}
		for _, want := range []string{ids[0], ids[3]} {
			l, _, err := q.Take(ctx, opt)
			if err != nil {
				t.Fatalf("take after restore: %v", err)
			}
			if l.Message.ID != want {
				t.Fatalf("took %s, want %s (the order of the line)", l.Message.ID, want)
			}
			if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, Attempts: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := q.Take(ctx, opt); !errors.Is(err, queue.ErrEmpty) {
			t.Fatalf("the canceled message came back: %v", err)
		}
		st, err = q.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r := st[sms.ClassMarketing].Ready; r != 0 {
			t.Fatalf("marketing ready %d once all is sent, want 0", r)
		}
	})
	t.Run("SetAsideAfterResume", func(t *testing.T) {
		t.Parallel()
		q := h.New(t)
		sv := q.(queue.Shelver)
		ctx := t.Context()
		m := newMsg("a", sms.ClassTransactional)
		if _, err := q.Enqueue(ctx, m); err != nil {
			t.Fatal(err)
		}
		sh := h.Pause(t, q, "a", true)
		h.Pause(t, q, "a", false)
		opt := queue.TakeOptions{Owner: "t", Lease: time.Minute}
		l, _, err := q.Take(ctx, opt)
		if err != nil {
			t.Fatal(err)
		}
		if err := sv.SetAside(ctx, l, sh); err != nil {
			t.Fatal(err)
		}
		if err := sv.SetAside(ctx, l, sh); !errors.Is(err, queue.ErrLeaseLost) {
			t.Fatalf("a second set-aside of one lease: %v, want ErrLeaseLost", err)
		}
		l, _, err = q.Take(ctx, opt)
		if err != nil || l.Message.ID != m.ID {
			t.Fatalf("a message set aside after the pause was lifted is not back in line: %v", err)
		}
		if n, err := sv.Restore(ctx, "a", 10); err != nil || n != 0 {
			t.Fatalf("restore: %d, %v; want an empty shelf", n, err)
		}
	})
}
