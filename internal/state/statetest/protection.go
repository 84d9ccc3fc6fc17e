package statetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"smsgw/internal/state"
)

func take(t *testing.T, s state.NumberLimits, key string, limit int, window time.Duration) (bool, time.Duration) {
	t.Helper()
	ticket, after, err := s.Take(t.Context(), key, limit, window)
	if err != nil {
		t.Fatalf("Take %s: %v", key, err)
	}
	return ticket != "", after
}

// testNumberReturn: an OTP given back (refused after its Take) frees its
// place at once, on every replica; a ticket returned twice, or after its
// window, is no error and frees nothing more.
func testNumberReturn(t *testing.T, h Harness) {
	s := h.NumberLimits(t, 2)
	ctx := t.Context()
	var tickets []string
	for i := range 2 {
		ticket, _, err := s[i].Take(ctx, "r1", 2, minute)
		if err != nil || ticket == "" {
			t.Fatalf("Take %d of 2: %q, %v", i+1, ticket, err)
		}
		tickets = append(tickets, ticket)
	}
	if ok, _ := take(t, s[0], "r1", 2, minute); ok {
		t.Fatal("a third Take within the limit of 2 allowed")
	}
	if err := s[1].Return(ctx, "r1", tickets[0]); err != nil {
		t.Fatalf("Return: %v", err)
	}
	for range 2 { // a second Return of the same ticket frees nothing more
		if err := s[0].Return(ctx, "r1", tickets[0]); err != nil {
			t.Fatalf("Return again: %v", err)
		}
	}
	if ok, _ := take(t, s[0], "r1", 2, minute); !ok {
		t.Fatal("the returned place was not free")
	}
	if ok, _ := take(t, s[1], "r1", 2, minute); ok {
		t.Fatal("one Return freed two places")
	}
	if err := s[0].Return(ctx, "r1", "not-a-ticket"); err != nil {
		t.Fatalf("Return of an unknown ticket: %v", err)
	}
	if err := s[0].Return(ctx, "a b", tickets[1]); !errors.Is(err, state.ErrInvalidKey) {
		t.Errorf("Return with a bad key: %v", err)
	}
}

func testNumberTake(t *testing.T, h Harness) {
	s := h.NumberLimits(t, 2)
	for i := range 3 {
		if ok, _ := take(t, s[i%2], "n1", 3, minute); !ok {
			t.Fatalf("Take %d of 3 refused", i+1)
		}
	}
	for range 3 {
		ok, after := take(t, s[1], "n1", 3, minute)
		if ok || after <= 0 || after > minute {
			t.Fatalf("Take over the limit = %v, %v; want refused with 0 < retryAfter <= 1m", ok, after)
		}
	}
	if ok, _ := take(t, s[0], "n2", 3, minute); !ok {
		t.Fatal("another key was refused")
	}
}

func testNumberWindow(t *testing.T, h Harness) {
	s := h.NumberLimits(t, 1)[0]
	const window = 300 * time.Millisecond
	if ok, _ := take(t, s, "n", 1, window); !ok {
		t.Fatal("first Take refused")
	}
	if ok, _ := take(t, s, "n", 1, window); ok {
		t.Fatal("second Take within the window allowed")
	}
	// Refused Takes record nothing: the number frees one window after the
	// allowed one, however often it was tried meanwhile.
	eventually(t, "the window to pass", func() bool { ok, _ := take(t, s, "n", 1, window); return ok })
}

func testNumberConcurrent(t *testing.T, h Harness) {
	s := h.NumberLimits(t, 3)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			ticket, _, err := s[i%3].Take(context.Background(), "hot", 5, minute)
			if err != nil {
				t.Error(err)
			}
			if ticket != "" {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if n := ok.Load(); n != 5 {
		t.Fatalf("%d of 30 concurrent Takes allowed, want exactly 5", n)
	}
}

func testNumberInvalid(t *testing.T, h Harness) {
	s := h.NumberLimits(t, 1)[0]
	ctx := t.Context()
	if _, _, err := s.Take(ctx, "a b", 1, minute); !errors.Is(err, state.ErrInvalidKey) {
		t.Errorf("bad key: %v", err)
	}
	for _, c := range []struct {
		limit  int
		window time.Duration
	}{{0, minute}, {state.MaxNumberLimit + 1, minute}, {1, time.Microsecond}} {
		if _, _, err := s.Take(ctx, "k", c.limit, c.window); !errors.Is(err, state.ErrInvalidLimit) {
			t.Errorf("limit %d window %s: %v", c.limit, c.window, err)
		}
	}
}

func entry(id string) state.Suppression {
	return state.Suppression{ID: id, Masked: "+8190****5678", Reason: "asked to stop " + id, CreatedAt: time.Unix(1700000000, 0).UTC(),
		Source: state.SourceOperator}
}

func contains(t *testing.T, s state.Suppressions, ids ...string) []bool {
	t.Helper()
	got, err := s.Contains(t.Context(), ids)
	if err != nil || len(got) != len(ids) {
		t.Fatalf("Contains %v = %v, %v", ids, got, err)
	}
	return got
}

func testSuppressAddRemove(t *testing.T, h Harness) {
	s := h.Suppressions(t, 0, 2)
	ctx := t.Context()
	if added, err := s[0].Add(ctx, entry("a1")); err != nil || !added {
		t.Fatalf("Add = %v, %v", added, err)
	}
	second := entry("a1")
	second.Reason = "other"
	if added, err := s[1].Add(ctx, second); err != nil || added {
		t.Fatalf("second Add = %v, %v; want false", added, err)
	}
	if got := contains(t, s[1], "a1", "b2"); !got[0] || got[1] {
		t.Fatalf("Contains a1, b2 = %v", got)
	}
	list, err := s[1].List(ctx, "", 10)
	if err != nil || len(list) != 1 || list[0] != entry("a1") {
		t.Fatalf("List = %+v, %v; want the first entry", list, err)
	}
	if n, err := s[0].Count(ctx); err != nil || n != 1 {
		t.Fatalf("Count = %d, %v", n, err)
	}
	if removed, err := s[1].Remove(ctx, "a1"); err != nil || !removed {
		t.Fatalf("Remove = %v, %v", removed, err)
	}
	if removed, err := s[0].Remove(ctx, "a1"); err != nil || removed {
		t.Fatalf("second Remove = %v, %v", removed, err)
	}
	if got := contains(t, s[0], "a1"); got[0] {
		t.Fatal("still listed after Remove")
	}
	if n, err := s[1].Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count after Remove = %d, %v", n, err)
	}
}

func testSuppressPaging(t *testing.T, h Harness) {
	s := h.Suppressions(t, 0, 2)
	for i := range 25 {
		if _, err := s[i%2].Add(t.Context(), entry(fmt.Sprintf("id%02d", 24-i))); err != nil {
			t.Fatal(err)
		}
	}
	var all []string
	after := ""
	for range 4 {
		page, err := s[1].List(t.Context(), after, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			all = append(all, e.ID)
		}
		after = page[len(page)-1].ID
	}
	if len(all) != 25 {
		t.Fatalf("paged %d entries, want 25: %v", len(all), all)
	}
	for i, id := range all {
		if id != fmt.Sprintf("id%02d", i) {
			t.Fatalf("entry %d is %s: not in ID order: %v", i, id, all)
		}
	}
}

// testSuppressBound: the bound refuses an operator's Add of a new id, not
// one of an id already listed; a recipient's or the provider's opt-out is
// added past it.
func testSuppressBound(t *testing.T, h Harness) {
	s := h.Suppressions(t, 3, 1)[0]
	for i := range 3 {
		if _, err := s.Add(t.Context(), entry(fmt.Sprintf("b%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Add(t.Context(), entry("b3")); !errors.Is(err, state.ErrSuppressionsFull) {
		t.Fatalf("Add past the bound = %v, want ErrSuppressionsFull", err)
	}
	if added, err := s.Add(t.Context(), entry("b1")); err != nil || added {
		t.Fatalf("Add of a listed id when full = %v, %v; want false, nil", added, err)
	}
	if removed, err := s.Remove(t.Context(), "b0"); err != nil || !removed {
		t.Fatal(removed, err)
	}
	if added, err := s.Add(t.Context(), entry("b3")); err != nil || !added {
		t.Fatalf("Add after a Remove = %v, %v", added, err)
	}
	// Opt-outs go past the bound: one refused would be lost.
	for i, src := range []state.SuppressionSource{state.SourceRecipient, state.SourceProvider} {
		e := entry(fmt.Sprintf("o%d", i))
		e.Source = src
		if added, err := s.Add(t.Context(), e); err != nil || !added {
			t.Fatalf("Add of a %s entry on a full list = %v, %v; want it added", src, added, err)
		}
	}
	if n, err := s.Count(t.Context()); err != nil || n != 5 {
		t.Fatalf("Count = %d, %v; want 5", n, err)
	}
	if _, err := s.Add(t.Context(), entry("b4")); !errors.Is(err, state.ErrSuppressionsFull) {
		t.Fatalf("an operator's Add past the bound after opt-outs = %v, want ErrSuppressionsFull", err)
	}
}

func testSuppressKey(t *testing.T, h Harness) {
	s := h.Suppressions(t, 0, 2)
	a, err := s[0].Key(t.Context())
	if err != nil || len(a) != 32 {
		t.Fatalf("Key = %x, %v", a, err)
	}
	for _, x := range s {
		b, err := x.Key(t.Context())
		if err != nil || string(a) != string(b) {
			t.Fatalf("Key on another handle = %x, %v; want %x", b, err, a)
		}
	}
}

func testSuppressInvalid(t *testing.T, h Harness) {
	s := h.Suppressions(t, 0, 1)[0]
	ctx := t.Context()
	if _, err := s.Add(ctx, state.Suppression{ID: "+819012345678"}); !errors.Is(err, state.ErrInvalidKey) {
		t.Errorf("Add of a number as id: %v", err)
	}
	if _, err := s.Remove(ctx, ""); !errors.Is(err, state.ErrInvalidKey) {
		t.Errorf("Remove of an empty id: %v", err)
	}
	if _, err := s.Contains(ctx, []string{"ok", "a:b"}); !errors.Is(err, state.ErrInvalidKey) {
		t.Errorf("Contains of a bad id: %v", err)
	}
	if n, err := s.Count(ctx); err != nil || n != 0 {
		t.Errorf("Count after refused calls = %d, %v", n, err)
	}
}

// testSuppressSource: every entry keeps its source on every handle; one
// added without a source, the bytes an entry had before sources existed,
// lists as an operator's.
func testSuppressSource(t *testing.T, h Harness) {
	s := h.Suppressions(t, 0, 2)
	ctx := t.Context()
	want := map[string]state.SuppressionSource{}
	for i, src := range []state.SuppressionSource{"", state.SourceOperator, state.SourceRecipient, state.SourceProvider} {
		e := entry(fmt.Sprintf("s%d", i))
		e.Source = src
		if added, err := s[i%2].Add(ctx, e); err != nil || !added {
			t.Fatalf("Add %+v = %v, %v", e, added, err)
		}
		want[e.ID] = src.OrOperator()
	}
	list, err := s[1].List(ctx, "", 10)
	if err != nil || len(list) != len(want) {
		t.Fatalf("List = %+v, %v", list, err)
	}
	for _, e := range list {
		if e.Source != want[e.ID] {
			t.Errorf("entry %s lists source %q, want %q", e.ID, e.Source, want[e.ID])
		}
	}
	if e := entry("bad"); true {
		e.Source = "someone"
		if _, err := s[0].Add(ctx, e); err == nil {
			t.Error("Add with an unknown source: no error")
		}
		if got := contains(t, s[0], "bad"); got[0] {
			t.Error("an entry with an unknown source was stored")
		}
	}
}

// testSuppressLift: Lift removes only an entry of a source it names, on
// any handle, atomically; an operator's entry (one stored without a
// source too) is kept; an absent id is LiftAbsent.
func testSuppressLift(t *testing.T, h Harness) {
	s := h.Suppressions(t, 0, 2)
	ctx := t.Context()
	mine := []state.SuppressionSource{state.SourceRecipient, state.SourceProvider}
	add := func(id string, src state.SuppressionSource) {
		t.Helper()
		e := entry(id)
		e.Source = src
		if added, err := s[0].Add(ctx, e); err != nil || !added {
			t.Fatalf("Add %s = %v, %v", id, added, err)
		}
	}
	add("op", state.SourceOperator)
	add("old", "")
	add("rcpt", state.SourceRecipient)
	add("prov", state.SourceProvider)
	for _, c := range []struct {
		id   string
		want state.LiftResult
	}{{"op", state.LiftKept}, {"old", state.LiftKept}, {"rcpt", state.LiftRemoved}, {"prov", state.LiftRemoved}, {"none", state.LiftAbsent}} {
		got, err := s[1].Lift(ctx, c.id, mine...)
		if err != nil || got != c.want {
			t.Errorf("Lift %s = %v, %v; want %v", c.id, got, err, c.want)
		}
	}
	if got := contains(t, s[0], "op", "old", "rcpt", "prov"); !got[0] || !got[1] || got[2] || got[3] {
		t.Fatalf("after Lift, Contains op, old, rcpt, prov = %v; want true true false false", got)
	}
	if n, err := s[0].Count(ctx); err != nil || n != 2 {
		t.Fatalf("Count after Lift = %d, %v; want 2", n, err)
	}
	if got, err := s[0].Lift(ctx, "rcpt", mine...); err != nil || got != state.LiftAbsent {
		t.Errorf("second Lift = %v, %v; want absent", got, err)
	}
	// An operator may lift their own entries this way too.
	if got, err := s[0].Lift(ctx, "old", state.SourceOperator); err != nil || got != state.LiftRemoved {
		t.Errorf("Lift of a sourceless entry as the operator's = %v, %v; want removed", got, err)
	}
	for _, bad := range [][]state.SuppressionSource{{"someone"}, {""}} {
		if _, err := s[0].Lift(ctx, "op", bad...); err == nil {
			t.Errorf("Lift with source %q: no error", bad)
		}
	}
	if _, err := s[0].Lift(ctx, "a:b", mine...); !errors.Is(err, state.ErrInvalidKey) {
		t.Errorf("Lift of a bad id: %v", err)
	}
	if got := contains(t, s[1], "op"); !got[0] {
		t.Fatal("a refused Lift removed the entry")
	}
}

// testSuppressOperatorTakesOver: an operator's Add of a number the
// recipient (or the provider) put on the list answers false but makes the
// entry the operator's, so the recipient's opt-in no longer lifts it; a
// recipient's or provider's Add never changes an existing entry.
func testSuppressOperatorTakesOver(t *testing.T, h Harness) {
	s := h.Suppressions(t, 0, 2)
	ctx := t.Context()
	add := func(handle int, id string, src state.SuppressionSource, reason string) bool {
		t.Helper()
		e := entry(id)
		e.Source, e.Reason = src, reason
		added, err := s[handle].Add(ctx, e)
		if err != nil {
			t.Fatalf("Add %s as %s: %v", id, src, err)
		}
		return added
	}
	if !add(0, "r1", state.SourceRecipient, "stop") || !add(0, "p1", state.SourceProvider, "21610") {
		t.Fatal("first Adds not added")
	}
	if add(1, "r1", state.SourceProvider, "later") || add(1, "p1", state.SourceRecipient, "later") {
		t.Fatal("a second Add answered added")
	}
	if add(1, "r1", state.SourceOperator, "regulator") || add(0, "p1", "", "by phone") {
		t.Fatal("an operator's Add of a listed number answered added")
	}
	list, err := s[0].List(ctx, "", 10)
	if err != nil || len(list) != 2 {
		t.Fatalf("List = %+v, %v", list, err)
	}
	for _, e := range list {
		if e.Source != state.SourceOperator || (e.ID == "r1" && e.Reason != "regulator") {
			t.Errorf("entry %+v: want the operator's", e)
		}
	}
	for _, id := range []string{"r1", "p1"} {
		if got, err := s[1].Lift(ctx, id, state.SourceRecipient, state.SourceProvider); err != nil || got != state.LiftKept {
			t.Errorf("Lift %s after the operator took it over = %v, %v; want kept", id, got, err)
		}
	}
	if n, err := s[1].Count(ctx); err != nil || n != 2 {
		t.Errorf("Count = %d, %v; want 2", n, err)
	}
}
