package httpapi

import (
	"fmt"
	"time"
)

// Scheduling bounds of send_at (api/openapi.yaml).
const (
	// maxScheduleAhead is how far ahead send_at may be.
	maxScheduleAhead = 35 * 24 * time.Hour
	// sendAtSkew is how far in the past send_at may be: a producer whose
	// clock runs a little behind ours asks for "now". Such a message is
	// sent as soon as possible.
	sendAtSkew = time.Minute
)

// checkSendAt applies the time bounds of send_at at now. It runs inside
// the idempotent part of a request, not with the other field checks, so
// that a replay of an accepted request is answered as first even after
// its send_at has passed. The zero time means no send_at, so a request
// naming the zero instant (0001-01-01T00:00:00Z, in any offset) has to be
// refused with sendAtPast where its send_at is parsed.
func checkSendAt(sendAt, now time.Time, prefix string) *fieldProblem {
	switch {
	case sendAt.IsZero():
		return nil
	case sendAt.Before(now.Add(-sendAtSkew)):
		return sendAtPast(prefix)
	case sendAt.After(now.Add(maxScheduleAhead)):
		return &fieldProblem{prefix + "send_at", fmt.Sprintf("is more than %d days ahead", int(maxScheduleAhead/(24*time.Hour)))}
	}
	return nil
}

// sendAtPast is the 400 for a send_at more than sendAtSkew in the past.
func sendAtPast(prefix string) *fieldProblem {
	return &fieldProblem{prefix + "send_at", fmt.Sprintf("is in the past (more than %s before now)", sendAtSkew)}
}
