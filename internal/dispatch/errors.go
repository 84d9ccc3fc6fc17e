package dispatch

import (
	"errors"
	"fmt"
)

// ErrSendsCutShort is what Stop returns (as a *CutShortError) when its
// context ended before the sends in progress finished: they were cut short
// and their messages put back without spending an attempt, the expected
// end of a stop that ran out of time (docs/operations.md section 7), not a
// failure.
var ErrSendsCutShort = errors.New("in-flight sends cut short")

// CutShortError is Stop's error when its bound passed with sends in
// progress: Sends of them were cut short (counted when the bound passed)
// and put back. It is ErrSendsCutShort and Cause (the context's error) for
// errors.Is.
type CutShortError struct {
	Sends int
	Cause error
}

func (e *CutShortError) Error() string {
	return fmt.Sprintf("dispatch: stop: %v (%d): %v", ErrSendsCutShort, e.Sends, e.Cause)
}

// Unwrap makes the error both ErrSendsCutShort and its cause.
func (e *CutShortError) Unwrap() []error { return []error{ErrSendsCutShort, e.Cause} }

// SendsCutShort is Sends, for callers that may not import this package
// (cmd/smsgw: see internal/layering) and recognise the error by it.
func (e *CutShortError) SendsCutShort() int { return e.Sends }
