package queue

import (
	"fmt"
	"time"

	"smsgw/internal/sms"
)

// The codes the stored records of both backends and the final record write
// for a class and a status: one digit per class and one letter per status,
// fixed here rather than taken from the order of sms's constants, so that a
// record written by one version reads in the next. The Lua of redisq writes
// the same letters as literals.

// classCodes is the records' class numbering.
var classCodes = [...]sms.Class{0: sms.ClassOTP, 1: sms.ClassTransactional, 2: sms.ClassMarketing}

// statusCodes are the records' status codes (no word is one letter, so a
// reader tells a code from a status written out).
var statusCodes = map[sms.Status]string{
	sms.StatusQueued:      "q",
	sms.StatusSending:     "l",
	sms.StatusSent:        "s",
	sms.StatusFailed:      "f",
	sms.StatusExpired:     "x",
	sms.StatusDelivered:   "v",
	sms.StatusUndelivered: "u",
	sms.StatusCanceled:    "c",
	sms.StatusSuppressed:  "p",
}

// codeStatuses maps a status code back to its status.
var codeStatuses = func() map[string]sms.Status {
	out := make(map[string]sms.Status, len(statusCodes))
	for s, c := range statusCodes {
		out[c] = s
	}
	return out
}()

// RecordClasses are the classes in the order of their record codes.
func RecordClasses() [len(classCodes)]sms.Class { return classCodes }

// ClassCode is the record code of class c.
func ClassCode(c sms.Class) (uint8, error) {
	for code, cl := range classCodes {
		if cl == c {
			return uint8(code), nil
		}
	}
	return 0, fmt.Errorf("class %d has no record code", uint8(c))
}

// CodeClass is the class of a record code; false for an unknown code.
func CodeClass(code uint8) (sms.Class, bool) {
	if int(code) >= len(classCodes) {
		return 0, false
	}
	return classCodes[code], true
}

// StatusCode is the record code of status s.
func StatusCode(s sms.Status) (string, error) {
	if code, ok := statusCodes[s]; ok {
		return code, nil
	}
	return "", fmt.Errorf("status %q has no record code", s)
}

// CodeStatus is the status of a record code; false for an unknown code.
func CodeStatus(code string) (sms.Status, bool) {
	s, ok := codeStatuses[code]
	return s, ok
}

// UnixMs is t in Unix ms, truncated; 0 for the zero time: how the records
// store a time.
func UnixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// UnixMsUp is t in Unix ms rounded up, so that a not-before read back is
// never earlier than the one given.
func UnixMsUp(t time.Time) int64 {
	ms := UnixMs(t)
	if ms != 0 && time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}

// FromMs is the time of Unix ms ms (UTC); the zero time for 0.
func FromMs(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}
