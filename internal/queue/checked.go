package queue

import (
	"context"
	"time"

	"smsgw/internal/sms"
)

// Checks are the admission checks a store runs with an enqueue, in this
// order, atomically with storing the message (a Redis store: in the enqueue
// script itself, so that one round trip admits and stores):
//
//  1. a first answer stored under AnswerKey is returned (Replay), and
//     nothing else happens;
//  2. the producer's keyed-request GCRA (KeyedKey) denies one unit:
//     refused; granted, the unit stays spent whatever follows;
//  3. the message's number is on the suppression list: refused;
//  4. the producer has MaxOutstanding messages queued or in flight: refused;
//  5. the producer's ingress GCRA denies Cost: refused;
//  6. the message's own budget charge (sms.Message.Budget, budget.go)
//     would take a period of its producer's budget past its limit:
//     refused (the result's Err is an *OverBudget), the ingress unit
//     granted staying spent; a plain enqueue runs this check too;
//  7. the message is stored (or the one its idempotency key already names is
//     returned), and, when it is stored, Answer under AnswerKey for
//     AnswerTTL, and its budget charge is added.
//
// A refusal stores nothing and charges nothing but the keyed unit (and,
// refused by the budget, the ingress unit). Key names are the callers'
// (the idempotency store's, the suppression list's, the ingress limiter's,
// which also names the keyed-request GCRA)
// and must share the queue's account hash tag. A zero field skips its
// check. These are the InScript rows of admission.Order, the one
// admission order; the embedded store has no such call: admission's
// in-process executor runs the same rows one by one, where they cost no
// round trip, and one conformance suite runs both.
type Checks struct {
	AnswerKey string        // where a first answer is kept; "" none
	Answer    []byte        // stored under AnswerKey when the message is stored
	AnswerTTL time.Duration // how long it is kept

	SuppressionKey string // the HASH of suppressed number ids
	SuppressionID  string // this message's number id in it

	KeyedKey      string // the producer's keyed-request GCRA key ("" none); its cost is 1
	KeyedInterval int64  // emission interval, µs
	KeyedBurst    int64

	MaxOutstanding int64 // 0: unlimited

	IngressKey      string // the producer's GCRA key ("" none)
	IngressInterval int64  // emission interval, µs
	IngressBurst    int64
	IngressCost     int64

	// TakenHere: the caller's own process has an idle lane for the class
	// and wakes it itself once the message is stored, so a backend that
	// wakes other processes (queue.Notifier) need not wake one for it.
	TakenHere bool
}

// Checked is a message and the checks that come before storing it.
type Checked struct {
	Message *sms.Message
	Checks  Checks
}

// Refusal is which check refused a message.
type Refusal int

// The refusals, in the order the checks run.
const (
	NotRefused         Refusal = iota // stored, or an existing message returned
	RefusedKeyed                      // the producer's keyed-request GCRA denied
	RefusedSuppressed                 // the number is on the suppression list
	RefusedOutstanding                // the producer is at its max_outstanding
	RefusedIngress                    // the producer's ingress GCRA denied
)

// Verdict is what the checks decided, beside the EnqueueResult.
type Verdict struct {
	Replay      []byte  // the first answer stored under AnswerKey (nothing else ran)
	Refused     Refusal // NotRefused when stored or existing
	Outstanding int64   // with RefusedOutstanding: the producer's count
	// The ingress GCRA's decision (when IngressKey was set and it ran):
	// remaining units and reset after, and with RefusedIngress the retry
	// after; with RefusedKeyed, RetryAfter is the keyed GCRA's.
	Ingress                bool
	RetryAfter, ResetAfter time.Duration
	Remaining              int
}

// CheckedResult is the outcome of one checked enqueue.
type CheckedResult struct {
	EnqueueResult
	Verdict
}

// CheckedEnqueuer is a queue that runs Checks with its enqueue in one
// round trip (redisq).
type CheckedEnqueuer interface {
	EnqueueChecked(ctx context.Context, cs []Checked) ([]CheckedResult, error)
}
