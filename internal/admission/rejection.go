// Package admission decides whether a message may be accepted, without
// HTTP: protection (destinations, the suppression list, OTPs per number),
// the send-time estimate and the TTL check, the operator pause, recipients'
// opt-outs and the enqueue coalescer. Its refusals are rejections; the API
// maps them to answers.
package admission

import "time"

// Rejection is admission's answer when a message may not be accepted: why
// (its kind), what to tell the producer, and when to try again. Admission
// knows nothing of HTTP: the API maps each kind to its problem type and
// status in one place (problem.go, rejectionKinds).
type Rejection struct {
	Kind       RejectKind
	Detail     string        // safe to show the producer
	Fields     []rejectField // the request fields at fault, if any
	RetryAfter time.Duration // when the same request may succeed; 0: never by itself
	Extra      map[string]any
	Err        error // cause, logged, never shown
}

// RejectKind is the closed set of admission's refusals.
type RejectKind string

// The kinds of rejection.
const (
	RejectDestination  RejectKind = "destination-not-allowed"  // region not in protection.countries
	RejectNumberType   RejectKind = "number-type-blocked"      // type in protection.block_number_types
	RejectSuppressed   RejectKind = "suppressed"               // the number is on the suppression list
	RejectOTPPerNumber RejectKind = "otp-number-limited"       // protection.otp_per_number
	RejectRangeHeld    RejectKind = "range-held"               // protection.prefix_alarm.hold
	RejectExpires      RejectKind = "would-expire-before-send" // TTL shorter than the backlog ahead
	RejectUnavailable  RejectKind = "unavailable"              // a store admission needs is down or slow
	RejectInvalid      RejectKind = "invalid"                  // a field out of its bounds at admission (send_at)
	RejectOutstanding  RejectKind = "too-many-outstanding"     // the producer's max_outstanding
	RejectRateLimited  RejectKind = "rate-limited"             // the producer's ingress GCRA
	RejectTooManyKeyed RejectKind = "too-many-keyed-requests"  // the producer's max_keyed_per_day
	RejectBudget       RejectKind = "budget-exhausted"         // the producer's daily or monthly budget
)

// rejectField names one request field a rejection is about.
type rejectField struct {
	Field  string
	Reason string
}

func (r *Rejection) Error() string {
	s := string(r.Kind)
	if r.Detail != "" {
		s += ": " + r.Detail
	}
	if r.Err != nil {
		s += ": " + r.Err.Error()
	}
	return s
}

func (r *Rejection) Unwrap() error { return r.Err }
