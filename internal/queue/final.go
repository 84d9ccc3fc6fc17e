package queue

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"smsgw/internal/sms"
)

// The final record: what a backend keeps of a message once nothing more will
// be sent (sent, failed, expired). The body, the full number and the
// Idempotency-Key are dropped: they are personal data or were needed
// only to send, and they were most of a message's bytes. What stays answers
// GET /v1/messages/{id}, a replay of the first answer and a later receipt:
// status, class, attempts, segments and encoding, producer, reference, the
// provider's id, the masked number, the sender id, the last error, a prefix of the request
// digest (when the message had an Idempotency-Key) and the times.
//
// It is one line of fields separated by finalSep, positional, starting with
// its version, so that it costs few bytes in RAM (Redis) and on disk
// (embedded); both backends use this one codec. Numbers are base 36. Times
// are milliseconds relative to the id's creation time (sms.IDTime), empty
// for none (the creation time: empty for the id's own). The two last fields
// are the times of the last change and of the send ("=" for the same as the
// last change), so that a backend whose clock is elsewhere (redisq: Redis
// TIME inside a script) can append them to FinalPrefix itself. The common
// statuses are one letter (finalStatus); others are written out.

// finalSep separates the fields; any in a value is dropped.
const finalSep = "\x1f"

// finalVersion starts every final record of this layout. Version 2 added
// the message's callback fields (the Callbacks flag and its callback_url)
// before the two times, so that a receipt for a message compacted at sent
// still writes its status event; version 1 records (no callback fields)
// are still read.
const finalVersion = "2"

// finalFields is the number of fields of version 2; finalFieldsV1 those of
// version 1.
const (
	finalFields   = 20
	finalFieldsV1 = 18
)

// FinalHashLen is how much of the request digest a final record keeps:
// 64 bits tell a replay with another body apart as well as the whole
// digest does in practice.
const FinalHashLen = 16

// SameRequest reports whether digest (of a new request) is the one stored,
// which may be a final record's prefix of it.
func SameRequest(stored, digest string) bool {
	if len(stored) == FinalHashLen && len(digest) > FinalHashLen {
		return strings.HasPrefix(digest, stored)
	}
	return stored == digest
}

// classDigit is the class as one digit, the records' numbering.
func classDigit(c sms.Class) string {
	switch c {
	case sms.ClassOTP:
		return "0"
	case sms.ClassTransactional:
		return "1"
	}
	return "2"
}

var digitClass = map[string]sms.Class{"0": sms.ClassOTP, "1": sms.ClassTransactional, "2": sms.ClassMarketing}

// finalStatus are the one-letter codes of the common final statuses.
var finalStatus = map[sms.Status]string{sms.StatusSent: "s", sms.StatusFailed: "f", sms.StatusExpired: "x"}

func statusField(st sms.Status) string {
	if c, ok := finalStatus[st]; ok {
		return c
	}
	return string(st)
}

func fieldStatus(f string) sms.Status {
	for st, c := range finalStatus {
		if c == f {
			return st
		}
	}
	return sms.Status(f)
}

func b36(n int64) string { return strconv.FormatInt(n, 36) }

func clean(s string) string { return strings.ReplaceAll(s, finalSep, "") }

// rel is t in ms after base, "" for the zero time.
func rel(t, base time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := t.Sub(base)
	ms := d.Milliseconds()
	if d < 0 && d%time.Millisecond != 0 {
		ms-- // floor, so that reading it back gives t truncated to the ms
	}
	return b36(ms)
}

// FinalPrefix is the final record of m without its two times (last change
// and send) but with the separator before them; m.Status must be final.
func FinalPrefix(m *sms.Message) (string, error) {
	if !m.Status.Terminal() {
		return "", fmt.Errorf("final record of %s: status %q is not final", m.ID, m.Status)
	}
	base, ok := sms.IDTime(m.ID)
	if !ok {
		return "", fmt.Errorf("final record: malformed id %q", m.ID)
	}
	enc, segments := m.Encoding, m.Segments
	if m.Body != "" {
		seg := sms.CountSegments(m.Body)
		enc = seg.Encoding
		if segments == 0 {
			segments = seg.Count
		}
	}
	encCode := ""
	if enc == sms.UCS2 {
		encCode = "u"
	}
	hash := ""
	if m.IdempotencyKey != "" {
		hash = m.RequestHash[:min(len(m.RequestHash), FinalHashLen)]
	}
	created := rel(m.CreatedAt, base)
	if created == "0" {
		created = ""
	}
	fields := []string{
		finalVersion, statusField(m.Status), classDigit(m.Class), b36(int64(m.Attempts)), b36(int64(segments)), encCode,
		clean(m.Producer), clean(m.Reference), clean(m.ProviderID), sms.MaskPhone(m.To), clean(m.LastError), hash,
		created, msOrEmpty(m.SendAt), rel(m.ExpiresAt, m.CreatedAt), clean(m.From),
		callbacksField(m.Callbacks), clean(m.CallbackURL),
	}
	return strings.Join(fields, finalSep) + finalSep, nil
}

func callbacksField(on bool) string {
	if on {
		return "1"
	}
	return ""
}

func msOrEmpty(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return b36(t.UnixMilli())
}

// EncodeFinal is the final record of m with its own UpdatedAt and SentAt.
func EncodeFinal(m *sms.Message) (string, error) {
	p, err := FinalPrefix(m)
	if err != nil {
		return "", err
	}
	base, _ := sms.IDTime(m.ID)
	tu, ts := rel(m.UpdatedAt, base), rel(m.SentAt, base)
	if ts == tu && ts != "" {
		ts = "="
	}
	return p + tu + finalSep + ts, nil
}

// IsFinal reports whether a stored value is a final record.
func IsFinal(s string) bool {
	return strings.HasPrefix(s, finalVersion+finalSep) || strings.HasPrefix(s, "1"+finalSep)
}

// DecodeFinal reads the final record of message id.
func DecodeFinal(id, s string) (*sms.Message, error) {
	base, ok := sms.IDTime(id)
	if !ok {
		return nil, fmt.Errorf("final record: malformed id %q", id)
	}
	f := strings.Split(s, finalSep)
	switch {
	case len(f) == finalFields && f[0] == finalVersion:
	case len(f) == finalFieldsV1 && f[0] == "1":
		// version 1: no callback fields; the same layout otherwise
		f = append(f[:16:16], "", "", f[16], f[17])
	default:
		return nil, fmt.Errorf("final record of %s: %d fields, version %q", id, len(f), f[0])
	}
	class, ok := digitClass[f[2]]
	if !ok {
		return nil, fmt.Errorf("final record of %s: class %q", id, f[2])
	}
	var errs []error
	num := func(s string) int64 {
		if s == "" {
			return 0
		}
		n, err := strconv.ParseInt(s, 36, 64)
		errs = append(errs, err)
		return n
	}
	at := func(from time.Time, s string) time.Time {
		if s == "" {
			return time.Time{}
		}
		return from.Add(time.Duration(num(s)) * time.Millisecond)
	}
	m := &sms.Message{
		ID: id, Status: fieldStatus(f[1]), Class: class, Attempts: int(num(f[3])), Segments: int(num(f[4])),
		Producer: f[6], Reference: f[7], ProviderID: f[8], To: f[9], LastError: f[10], RequestHash: f[11],
	}
	m.CreatedAt = base.Add(time.Duration(num(f[12])) * time.Millisecond)
	if f[13] != "" {
		m.SendAt = time.UnixMilli(num(f[13])).UTC()
	}
	m.ExpiresAt = at(m.CreatedAt, f[14])
	m.From = f[15]
	m.Callbacks, m.CallbackURL = f[16] == "1", f[17]
	m.UpdatedAt = at(base, f[18])
	if f[19] == "=" {
		m.SentAt = m.UpdatedAt
	} else {
		m.SentAt = at(base, f[19])
	}
	m.Encoding = sms.GSM7
	if f[5] == "u" {
		m.Encoding = sms.UCS2
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("final record of %s: %w", id, err)
	}
	return m, nil
}
