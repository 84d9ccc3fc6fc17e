// Package smstest builds valid messages for the tests of the packages that
// store and send them, so that every test builds them the same way.
package smstest

import (
	"fmt"
	"sync/atomic"
	"time"

	"smsgw/internal/sms"
)

var seq atomic.Int64

// Message returns a valid message of class c from producer, built the way
// the API builds one: a fresh id, CreatedAt now, one segment, and a body
// and reference no other message of this process has.
func Message(producer string, c sms.Class) *sms.Message {
	return MessageAt(producer, c, time.Now())
}

// MessageAt is Message created at now, for tests that run their own clock.
// CreatedAt is now in UTC to the millisecond, the resolution every store
// keeps, so a message read back compares equal.
func MessageAt(producer string, c sms.Class, now time.Time) *sms.Message {
	n := seq.Add(1)
	now = now.UTC().Truncate(time.Millisecond)
	return &sms.Message{
		ID:        sms.NewID(now),
		Producer:  producer,
		Class:     c,
		To:        "+819012345678",
		Body:      fmt.Sprintf("test message %d", n),
		Reference: fmt.Sprintf("ref-%d", n),
		Segments:  1,
		CreatedAt: now,
	}
}
