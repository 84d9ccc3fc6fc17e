package sms

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
	"time"
)

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// NewID returns a new message id: "msg_" followed by 26 Crockford base32
// characters encoding 48 bits of Unix milliseconds and 80 random bits, so ids
// sort by creation time and never collide in practice across replicas.
func NewID(now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	// 128 bits -> 26 base32 chars (130 bits, top 2 zero).
	out := make([]byte, 4, 30)
	copy(out, "msg_")
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	var chars [26]byte
	for i := 25; i >= 0; i-- {
		chars[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(append(out, chars[:]...))
}

// ValidID reports whether s has the shape NewID produces. Its 26
// characters hold 130 bits of which NewID leaves the top two zero, so the
// first is 0 to 7: any other would make IDTime answer a time NewID cannot
// have written (up to four times its range, the year 37,000).
func ValidID(s string) bool {
	if len(s) != 30 || s[:4] != "msg_" || s[4] > '7' {
		return false
	}
	for i := 4; i < len(s); i++ {
		c := s[i]
		if strings.IndexByte(crockford, c) < 0 {
			return false
		}
	}
	return true
}

// IDTime is the creation time NewID wrote into id, to the millisecond; ok
// is false when id does not have NewID's shape.
func IDTime(id string) (t time.Time, ok bool) {
	if !ValidID(id) {
		return time.Time{}, false
	}
	// The first 10 characters are 50 bits: 2 zero bits and the 48 bits of
	// milliseconds.
	var ms int64
	for i := 4; i < 14; i++ {
		ms = ms<<5 | int64(strings.IndexByte(crockford, id[i]))
	}
	return time.UnixMilli(ms).UTC(), true
}

// batchPrefix starts every batch id.
const batchPrefix = "bat_"

// NewBatchID returns a new batch id: "bat_" followed by what NewID writes
// after "msg_" (the creation time, then random bits), so that batch ids
// sort by creation time like message ids.
func NewBatchID(now time.Time) string { return batchPrefix + NewID(now)[4:] }

// ValidBatchID reports whether s has the shape NewBatchID produces.
func ValidBatchID(s string) bool {
	return len(s) == 30 && s[:4] == batchPrefix && ValidID("msg_"+s[4:])
}

// BatchTime is the creation time NewBatchID wrote into id; ok is false
// when id does not have its shape.
func BatchTime(id string) (t time.Time, ok bool) {
	if !ValidBatchID(id) {
		return time.Time{}, false
	}
	return IDTime("msg_" + id[4:])
}
