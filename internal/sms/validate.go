package sms

// ValidationError says which field of a message is wrong and why. The HTTP
// layer turns it into a 4xx problem+json naming Field. Reason never repeats
// the rejected value, so the error is safe to log and to return.
type ValidationError struct {
	Field  string // "to", "from" or "body"
	Reason string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Reason }

func invalid(field, reason string) *ValidationError {
	return &ValidationError{Field: field, Reason: reason}
}
