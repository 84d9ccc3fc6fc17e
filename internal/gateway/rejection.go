package gateway

import "time"

// rejection is admission's answer when a message may not be accepted: why
// (its kind), what to tell the producer, and when to try again. Admission
// knows nothing of HTTP: the API maps each kind to its problem type and
// status in one place (problem.go, rejectionKinds).
type rejection struct {
	Kind       rejectKind
	Detail     string        // safe to show the producer
	Fields     []rejectField // the request fields at fault, if any
	RetryAfter time.Duration // when the same request may succeed; 0: never by itself
	Extra      map[string]any
	Err        error // cause, logged, never shown
}

// rejectKind is the closed set of admission's refusals.
type rejectKind string

const (
	rejectDestination  rejectKind = "destination-not-allowed"  // region not in protection.countries
	rejectNumberType   rejectKind = "number-type-blocked"      // type in protection.block_number_types
	rejectSuppressed   rejectKind = "suppressed"               // the number is on the suppression list
	rejectOTPPerNumber rejectKind = "otp-number-limited"       // protection.otp_per_number
	rejectExpires      rejectKind = "would-expire-before-send" // TTL shorter than the backlog ahead
	rejectUnavailable  rejectKind = "unavailable"              // a store admission needs is down or slow
)

// rejectField names one request field a rejection is about.
type rejectField struct {
	Field  string
	Reason string
}

func (r *rejection) Error() string {
	s := string(r.Kind)
	if r.Detail != "" {
		s += ": " + r.Detail
	}
	if r.Err != nil {
		s += ": " + r.Err.Error()
	}
	return s
}

func (r *rejection) Unwrap() error { return r.Err }
