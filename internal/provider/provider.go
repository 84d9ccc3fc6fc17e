// Package provider is the seam between the send loop and an SMS provider.
// Adapters live in sub-packages (httpprov for the generic protocol, twilio,
// vonage) and classify their own failures as *Error so the send loop never
// parses vendor responses. sim is the simulator the generic adapter talks to
// in tests, the demo and the benchmark; providertest is the conformance
// suite every adapter passes.
package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"smsgw/internal/sms"
)

// Request is one send. ID is the gateway's message id; adapters pass it to
// the provider as the idempotency key / client reference, the same on every
// attempt.
type Request struct {
	ID       string
	To       string
	From     string
	Body     string
	Segments int
	Class    sms.Class
	// AcceptedAt is when the gateway accepted the message. Adapters of the
	// generic protocol pass it on (X-Smsgw-Accepted-At, Unix nanoseconds) so
	// the simulator can measure arrival-to-provider latency.
	AcceptedAt time.Time
	// Validity is how long the provider may still try to deliver the
	// message: what is left of its TTL. 0: no limit of ours. Adapters pass
	// it on where the vendor takes one (Twilio ValidityPeriod, Vonage ttl),
	// so a message stuck in a vendor's queue is dropped there instead of
	// arriving after it expired.
	Validity time.Duration
}

// Result is the provider's answer to an accepted send.
type Result struct {
	ProviderID string // the provider's message id
}

// Provider sends one message. Send must honour ctx's deadline and must
// return either a Result or an error; adapters return *Error for every
// failure they can classify.
type Provider interface {
	Name() string
	Send(ctx context.Context, req *Request) (Result, error)
}

// Reason is the closed set of failure classes. It doubles as a metric label.
type Reason string

// The failure classes, with what the dispatcher does about each.
const (
	ReasonThrottled   Reason = "throttled"    // 429 or vendor throttle: pause everyone for RetryAfter, requeue
	ReasonSuspended   Reason = "suspended"    // account suspended (403 from the sim): pause, requeue
	ReasonQueueFull   Reason = "queue_full"   // the vendor's queue for our sender is full: pause everyone for RetryAfter, requeue
	ReasonRejected    Reason = "rejected"     // permanent 4xx: bad number, bad body; fail the message
	ReasonOptedOut    Reason = "opted_out"    // the recipient opted out at the provider (replied STOP): the message ends suppressed, never retried; the number goes on the suppression list
	ReasonAuth        Reason = "auth"         // 401/403 credentials: not the message's fault; pause everyone, alert
	ReasonSetup       Reason = "setup"        // the account's settings refused (its sender, its id): like auth
	ReasonPartial     Reason = "partial"      // some parts of a long message were accepted, not all: never resend
	ReasonUnavailable Reason = "unavailable"  // 5xx
	ReasonTimeout     Reason = "timeout"      // no answer in time: outcome unknown, retry same key
	ReasonNetwork     Reason = "network"      // connection refused/reset: retry
	ReasonBadResponse Reason = "bad_response" // 2xx we could not parse: outcome unknown, retry same key
)

// Reasons lists every Reason, for creating metric label sets at zero.
var Reasons = []Reason{ReasonThrottled, ReasonSuspended, ReasonQueueFull, ReasonRejected, ReasonOptedOut, ReasonAuth, ReasonSetup,
	ReasonPartial, ReasonUnavailable, ReasonTimeout, ReasonNetwork, ReasonBadResponse}

// Error is a classified provider failure. It never carries secrets.
type Error struct {
	Reason     Reason
	Temporary  bool          // retrying the same message may succeed
	RetryAfter time.Duration // > 0 for throttles; how long every sender must pause
	Status     int           // HTTP status, if any
	Message    string        // short, safe description (vendor error code/text)
	// NotSent: the request never left this process (the dial or the name
	// lookup failed), so the provider cannot have the message. Any other
	// failure without an answer (a reset or EOF after the request was
	// written) may have reached it.
	NotSent bool

	// For ReasonPartial: the vendor's ids of the parts it accepted, and
	// the reason of the first part it refused (a throttle there still
	// pauses everyone, for RetryAfter).
	Accepted   []string
	PartReason Reason

	// Scope says whose limit or setup the answer is about when the
	// adapter knows it is not the account's: ScopeSender for the send's
	// sender alone (its rate, its queue at the vendor, its setup). ""
	// is the reason's own scope (Error.ScopeOf).
	Scope Scope
}

// Scope is whose an answer is: the message's, the sender's or the
// account's. A throttle, a queue full or a setup refusal of the sender's
// scope pauses that sender alone; of the account's, every send.
type Scope string

// The scopes.
const (
	ScopeMessage Scope = "message"
	ScopeSender  Scope = "sender"
	ScopeAccount Scope = "account"
)

// ScopeOf is e's scope: the adapter's when it said one, else the
// reason's: a throttle, a suspension, a queue full, refused credentials
// or setup are the account's, anything else the message's.
func (e *Error) ScopeOf() Scope {
	if e.Scope != "" {
		return e.Scope
	}
	r := e.Reason
	if r == ReasonPartial {
		r = e.PartReason
	}
	switch r {
	case ReasonThrottled, ReasonSuspended, ReasonQueueFull, ReasonAuth, ReasonSetup:
		return ScopeAccount
	}
	return ScopeMessage
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("provider: %s (status %d): %s", e.Reason, e.Status, e.Message)
	}
	return fmt.Sprintf("provider: %s: %s", e.Reason, e.Message)
}

// AsError returns the *Error inside err, or nil.
func AsError(err error) *Error {
	var pe *Error
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

// MinRetryAfter is the floor for any pause derived from a provider answer:
// a missing, unparseable, zero or negative Retry-After becomes one second.
const MinRetryAfter = time.Second
