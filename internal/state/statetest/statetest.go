// Package statetest is the conformance suite of internal/state. Every
// implementation set (Local; Redis on one node; Redis on a Cluster) runs it
// from its own tests:
//
//	func TestConformance(t *testing.T) {
//		statetest.Run(t, statetest.Harness{Idempotency: ..., Pause: ..., Counters: ..., Throttles: ...})
//	}
//
// The contract the suite pins down, so that embedded mode (Local) and Redis
// mode behave alike:
//
// Idempotency.
//   - Acquire on a key with no answer and no live lock takes the lock and
//     returns a non-empty token; while the lock lives, Acquire on any handle
//     returns neither answer nor token (in flight); of concurrent Acquires
//     exactly one gets a token.
//   - Finish with the lock's token and an answer stores the answer and
//     releases the lock; from then on Acquire returns the answer, byte for
//     byte, for the store's window, and after the window takes the lock
//     again. Finish without an answer only releases the lock.
//   - A lock expires after its lockTTL. A Finish whose token no longer holds
//     the lock never releases the new holder's lock (but stores its answer).
//   - Keys are independent. A key ValidKey refuses, and a lockTTL under 1 ms,
//     are errors (ErrInvalidKey for the key) that change nothing.
//
// Pause.
//   - Get of a fresh switch is off. Set(d, reason) turns it on for every
//     handle: with Remaining ≤ d (and close to it) for d > 0, with Remaining
//     0 until Clear for d = 0; a later Set replaces an earlier one whatever
//     their lengths; a timed pause turns off by itself after d. Clear turns
//     it off for every handle.
//   - A negative d, a d under 1 ms other than 0, and a reason over
//     MaxPauseReason bytes are errors that change nothing.
//
// Counters.
//   - Read returns every field of the set, 0 before any Add, and a zero
//     since. Add returns the totals after it: the sum of every Add on every
//     handle, none lost under concurrency; since is set by the first Add
//     (close to now) and never moves after.
//   - An Add naming a field outside the set fails with ErrUnknownField and
//     adds nothing, not even its known fields.
//
// Throttles.
//   - Count of a fresh window is 0. Record429 returns the count including
//     the new 429; every handle counts the same 429s, each once, under
//     concurrency. A 429 leaves the window once it is one window old.
//
// NumberLimits.
//   - Take on a key succeeds limit times within a window, on any handle,
//     then fails with a retryAfter in (0, window] and records nothing; keys
//     are independent; once the oldest OTP is a window old, Take succeeds
//     again. Of concurrent Takes on one key exactly limit succeed.
//   - A key ValidKey refuses is ErrInvalidKey; a limit outside
//     1..MaxNumberLimit or a window under 1 ms is ErrInvalidLimit.
//
// Suppressions.
//   - Add puts an entry on the list for every handle (Contains, List,
//     Count); a second Add of the same ID answers false and keeps the
//     first entry; Remove takes it off (true), a second Remove answers
//     false. List pages in ID order from after, never repeating an entry.
//     Past the store's bound Add is ErrSuppressionsFull.
//   - An entry keeps its Source; one added without a source (the bytes
//     of an entry stored before sources existed) lists as an operator's.
//     Lift removes an entry only when its source is one of those asked
//     for (LiftRemoved), keeps any other (LiftKept), and answers
//     LiftAbsent for an ID not listed; an unknown source is an error that
//     changes nothing. An operator's Add of a listed ID answers false and
//     makes the entry the operator's; any other second Add changes
//     nothing.
//   - Key is 32 bytes, the same on every handle and on every call.
//   - RememberApplied makes a key Applied on every handle (for
//     AppliedMemory); past the store's bound (SetMaxApplied) the oldest
//     key is forgotten first. LiftOlder lifts as Lift does, but keeps an
//     entry created after the message's time, to the second (LiftNewer).
//   - An ID ValidKey refuses is ErrInvalidKey and changes nothing.
//
// StickySenders: see sticky.go.
//
// Every store.
//   - With a cancelled context every call returns an error wrapping
//     context.Canceled.
package statetest

import (
	"testing"
	"time"

	"smsgw/internal/state"
)

// Harness is how the suite reaches one implementation set. Each func returns
// n handles on one fresh storage of its own (Redis: n clients on a new
// account; Local: the same store n times, since one process is one
// replica), arranging its own cleanup with t.Cleanup.
type Harness struct {
	Idempotency func(t *testing.T, window time.Duration, n int) []state.Idempotency
	Pause       func(t *testing.T, n int) []state.Pause
	Counters    func(t *testing.T, fields []string, n int) []state.Counters
	Throttles   func(t *testing.T, window time.Duration, n int) []state.Throttles
	// NumberLimits returns n handles of one fresh store.
	NumberLimits func(t *testing.T, n int) []state.NumberLimits
	// Suppressions returns n handles of one fresh list bounded by
	// maxEntries.
	Suppressions func(t *testing.T, maxEntries, n int) []state.Suppressions
	// StickySenders returns n handles of one fresh store.
	StickySenders func(t *testing.T, n int) []state.StickySenders
}

// Run runs every conformance case against the implementations h reaches.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Idempotency == nil || h.Pause == nil || h.Counters == nil || h.Throttles == nil ||
		h.NumberLimits == nil || h.Suppressions == nil || h.StickySenders == nil {
		t.Fatal("statetest: every Harness func is required")
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, h)
		})
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, h Harness)
}

// eventually polls cond until it holds (a state, never a fixed sleep) or a
// generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
