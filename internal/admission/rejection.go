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

const (
	RejectDestination  RejectKind = "destination-not-allowed"  // region not in protection.countries
	RejectNumberType   RejectKind = "number-type-blocked"      // type in protection.block_number_types
	RejectSuppressed   RejectKind = "suppressed"               // the number is on the suppression list
	RejectOTPPerNumber RejectKind = "otp-number-limited"       // protection.otp_per_number
	RejectExpires      RejectKind = "would-expire-before-send" // TTL shorter than the backlog ahead
	RejectUnavailable  RejectKind = "unavailable"              // a store admission needs is down or slow
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
