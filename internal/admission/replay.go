package admission

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"smsgw/internal/sms"
)

// The replay step's keys and digests: a request's Idempotency-Key names
// its first answer in the answer store (IdemKey), and the request's digest
// (RequestHash) tells a replay from another request under the same key.

// IdemKey names one (producer, scope, Idempotency-Key) without letting any
// header text into a store key: 40 hex digits (state.ValidKey).
func IdemKey(producer, scope, key string) string {
	var stack [256]byte // the usual key fits: no allocation but the name
	buf := stack[:0]
	for _, s := range []string{producer, scope, key} {
		buf = strconv.AppendInt(buf, int64(len(s)), 10)
		buf = append(append(buf, ':'), s...)
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:20])
}

// RequestHash digests the canonical request (normalized number, every
// field that changes what is sent), so a replay under the same
// Idempotency-Key with another body is told apart.
func RequestHash(m *sms.Message, ttl time.Duration) string {
	var ttlBuf [20]byte
	fields := [...]string{"v1", m.Class.String(), m.To, m.From, m.Body, m.Reference,
		string(strconv.AppendInt(ttlBuf[:0], int64(ttl/time.Second), 10)), "", "", "", ""}
	n := 7
	if !m.SendAt.IsZero() {
		// only when set, so that the digest of every request without it
		// stays what earlier releases stored.
		fields[n], fields[n+1] = "send_at", m.SendAt.Format(time.RFC3339Nano)
		n += 2
	}
	if m.CallbackURL != "" {
		fields[n], fields[n+1] = "callback_url", m.CallbackURL
		n += 2
	}
	// One buffer, one digest: the same bytes as writing each part in turn.
	size := 0
	for _, f := range fields[:n] {
		size += 21 + len(f)
	}
	var stack [512]byte // the usual request fits: no allocation but the digest
	buf := stack[:0]
	if size > len(stack) {
		buf = make([]byte, 0, size)
	}
	for _, f := range fields[:n] {
		buf = strconv.AppendInt(buf, int64(len(f)), 10)
		buf = append(buf, ':')
		buf = append(buf, f...)
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:])
}
