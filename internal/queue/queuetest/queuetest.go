// Package queuetest is the conformance suite of the queue seam. Every backend
// runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		queuetest.Run(t, queuetest.Harness{New: ..., Reopen: ..., MultiClient: ...})
//	}
//
// The suite pins down the parts of the contract that queue.go leaves to
// judgement, so that backends agree:
//
//   - NotBefore is an absolute time; a backend compares it with its own clock
//     (which on one machine is the test's clock) and never hands a message out
//     before it, rounding up to its own resolution.
//   - Within a class, messages without a future NotBefore leave in enqueue
//     order. A recovered message keeps its place in line; a requeued one goes
//     to the back (or to now+After).
//   - Take returns a copy with Status sending and Attempts as stored; the
//     stored Attempts change only by Requeue with SpendAttempt (+1), Complete
//     and Dead (set to the given value) and RetryDead (reset to 0).
//   - Complete stores Outcome.Reason as LastError, ProviderID, and SentAt for
//     sent. Requeue stores LastError when given and sets NotBefore to
//     now+After when After > 0.
//   - A lease stays valid until Recover hands the message on: ack calls on an
//     expired but not yet recovered lease still succeed.
//   - Extend, Complete, Requeue and Dead with a lease not held (recovered,
//     retaken, already ended) return an error wrapping ErrLeaseLost.
//   - Get and RetryDead of an unknown id wrap ErrNotFound; so does RetryDead of
//     a message that is not a dead letter.
//   - OldestAge is how long the head of a class has been due: now minus
//     max(enqueue time, NotBefore) of the first ready message.
//   - Outstanding counts a producer's queued (ready or scheduled) and leased
//     messages, not dead letters.
//   - With a cancelled context every call returns an error wrapping
//     context.Canceled.
//   - After Close every call returns an error wrapping ErrClosed; a second
//     Close returns nil or ErrClosed.
//   - Take-time suppression (listed.go): with TakeOptions.Suppression, a
//     message whose number id is on the list when a take reaches it is
//     ended suppressed, never handed out.
//   - Outbox (outbox.go): Complete and Dead of a message stored with
//     Callbacks write exactly one event in the same step; a message without
//     writes none. A claimed event is claimable again, with the same ID, once
//     its claim's lease passes (a replica died between claim and ack); the
//     old claim's ack then fails with ErrLeaseLost.
package queuetest

import (
	"slices"
	"testing"

	"smsgw/internal/queue"
)

// Harness is how the suite reaches one backend.
type Harness struct {
	// New returns a queue over fresh, empty storage of its own (a temp dir,
	// a random key prefix), so that cases run in parallel. It arranges its
	// own cleanup with t.Cleanup; the suite may Close the queue earlier, so
	// the cleanup must accept a queue already closed.
	New func(t *testing.T) queue.Queue
	// Reopen closes q and opens the same storage again (durability: what
	// was acknowledged survives). Optional: nil skips the durability cases.
	Reopen func(t *testing.T, q queue.Queue) queue.Queue
	// MultiClient returns n more handles on the storage of q (redis:
	// separate connections), closed by the harness's cleanup. Optional: nil
	// means the concurrency cases share q.
	MultiClient func(t *testing.T, q queue.Queue, n int) []queue.Queue
	// Suppressions returns a suppression list beside q's storage for the
	// take-time cases (listed.go): the Suppression a take is given, with
	// the field the backend reads (Key or Listed) set, and add, which puts
	// a number id on the list. Optional: nil skips those cases.
	Suppressions func(t *testing.T, q queue.Queue) (s queue.Suppression, add func(id string))
}

// Run runs every conformance case against the backend h reaches.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("queuetest: Harness.New is required")
	}
	// A new slice: backends run the suite in parallel and share no
	// slice of cases between them.
	for _, c := range slices.Concat(cases, outboxCases, laneCases) {
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
