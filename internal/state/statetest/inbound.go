package statetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"smsgw/internal/state"
)

// testApplied: a message remembered on one handle is Applied on every
// handle, others are not; past the bound the oldest is forgotten first,
// never the newest; remembering again renews without counting twice; a
// key ValidKey refuses is ErrInvalidKey.
func testApplied(t *testing.T, h Harness) {
	s := h.Suppressions(t, 0, 2)
	ctx := t.Context()
	applied := func(key string) bool {
		t.Helper()
		ok, err := s[1].Applied(ctx, key)
		if err != nil {
			t.Fatalf("Applied %s: %v", key, err)
		}
		return ok
	}
	if applied("m1") {
		t.Fatal("a message never remembered is Applied")
	}
	if err := s[0].RememberApplied(ctx, "m1"); err != nil {
		t.Fatal(err)
	}
	if !applied("m1") || applied("m2") {
		t.Fatalf("after remembering m1: m1 %v, m2 %v; want true, false", applied("m1"), applied("m2"))
	}
	b, ok := s[0].(interface{ SetMaxApplied(int) })
	if !ok {
		t.Fatalf("%T cannot lower its bound of applied messages", s[0])
	}
	b.SetMaxApplied(3)
	for i := 2; i <= 4; i++ {
		if err := s[0].RememberApplied(ctx, fmt.Sprintf("m%d", i)); err != nil {
			t.Fatal(err)
		}
		if i == 2 { // renewing m2 does not take a second place
			if err := s[0].RememberApplied(ctx, "m2"); err != nil {
				t.Fatal(err)
			}
		}
	}
	for key, want := range map[string]bool{"m1": false, "m2": true, "m3": true, "m4": true} {
		if got := applied(key); got != want {
			t.Errorf("past the bound of 3, Applied %s = %v; want %v (the oldest forgotten first)", key, got, want)
		}
	}
	if _, err := s[0].Applied(ctx, "a:b"); !errors.Is(err, state.ErrInvalidKey) {
		t.Errorf("Applied of a bad key: %v", err)
	}
	if err := s[0].RememberApplied(ctx, ""); !errors.Is(err, state.ErrInvalidKey) {
		t.Errorf("RememberApplied of a bad key: %v", err)
	}
}

// testLiftOlder: LiftOlder removes a recipient's or provider's entry only
// for a message not older than the entry (to the second), keeps it for
// an older one (LiftNewer), keeps an operator's whatever the time, and
// answers LiftAbsent for an id not listed.
func testLiftOlder(t *testing.T, h Harness) {
	s := h.Suppressions(t, 0, 2)
	ctx := t.Context()
	mine := []state.SuppressionSource{state.SourceRecipient, state.SourceProvider}
	created := time.Unix(1700000000, 0).UTC()
	for id, src := range map[string]state.SuppressionSource{"rcpt": state.SourceRecipient, "prov": state.SourceProvider, "op": state.SourceOperator} {
		e := entry(id)
		e.Source, e.CreatedAt = src, created
		if added, err := s[0].Add(ctx, e); err != nil || !added {
			t.Fatalf("Add %s = %v, %v", id, added, err)
		}
	}
	for _, c := range []struct {
		id   string
		at   time.Time
		want state.LiftResult
	}{
		{"rcpt", created.Add(-7 * 24 * time.Hour), state.LiftNewer}, // a START from before the STOP
		{"rcpt", created.Add(-time.Second), state.LiftNewer},
		{"prov", created.Add(-time.Second), state.LiftNewer},
		{"op", created.Add(time.Hour), state.LiftKept},
		{"rcpt", created.Add(999 * time.Millisecond), state.LiftRemoved}, // the same second: in the order they came
		{"prov", created.Add(time.Minute), state.LiftRemoved},
		{"none", created.Add(time.Minute), state.LiftAbsent},
	} {
		if got, err := s[1].LiftOlder(ctx, c.id, c.at, mine...); err != nil || got != c.want {
			t.Errorf("LiftOlder %s at %v = %v, %v; want %v", c.id, c.at.Sub(created), got, err, c.want)
		}
	}
	if got := contains(t, s[0], "rcpt", "prov", "op"); got[0] || got[1] || !got[2] {
		t.Errorf("after LiftOlder, Contains rcpt, prov, op = %v; want false false true", got)
	}
	if _, err := s[0].LiftOlder(ctx, "a:b", created, mine...); !errors.Is(err, state.ErrInvalidKey) {
		t.Errorf("LiftOlder of a bad id: %v", err)
	}
}
