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
// be sent (sent, failed, expired, canceled, suppressed). The body, the full number, the
// number's suppression-list id (sms.Message.NumberID) and the Idempotency-Key are
// dropped: they are personal data or were needed only to send (the id only to
// check the list when the message is taken), and they were most of a message's
// bytes. What stays answers
// GET /v1/messages/{id}, a replay of the first answer and a later receipt:
// status, class, attempts, segments and encoding, producer, reference, the
// provider's id, the masked number, the sender id, the last error, a prefix of the request
// digest (when the message had an Idempotency-Key), the callback fields and
// the times.
//
// It is one line of fields separated by finalSep, positional, starting with
// its version, so that it costs few bytes in RAM (Redis) and on disk
// (embedded); both backends use this one codec. Numbers are base 36. Times
// are milliseconds relative to the id's creation time (sms.IDTime), empty
// for none (the creation time: empty for the id's own). The two last fields
// are the times of the last change and of the send ("=" for the same as the
// last change), so that a backend whose clock is elsewhere (redisq: Redis
// TIME inside a script) can append them to FinalPrefix itself.
//
// Version 3 (written now): ten fields, then six that are mostly empty, the
// empty ones at the end left out:
//
//	1 "3", the status (one letter, finalCode), the class digit, then "u"
//	for UCS-2 and "w" for callbacks  2 attempts ("" 1)  3 segments ("" 1)
//	4 producer  5 reference  6 provider id  7 masked number, each run of
//	k "*" written "*" and k in base 36  8 expiry (after created)  9 last
//	change  10 send  11 last error  12 digest prefix  13 created
//	14 send_at (Unix ms)  15 sender id  16 callback_url  17 batch id
//	(sms.Message.BatchID; a record without it has 16 fields or fewer)
//
// Version 2 (20 fields) and version 1 (18, no callback fields) are still
// read: 1 version  2 status (s f x, or the word)  3 class digit
// 4 attempts  5 segments  6 "u" for UCS-2  7 producer  8 reference
// 9 provider id  10 masked number  11 last error  12 digest prefix
// 13 created  14 send_at  15 expiry  16 sender id  (version 2: 17 "1" for
// callbacks  18 callback_url)  then the two times. The Lua of redisq edits
// the status, last error and times of every version (redisq/luasrc: fin_*).

// finalSep separates the fields; any in a value is dropped.
const finalSep = "\x1f"

// finalVersion starts every final record written now.
const finalVersion = "3"

// The number of fields of each version: version 3 has from finalFieldsMin
// to finalFields.
const (
	finalFieldsMin = 10
	finalFields    = 17
	finalFieldsV2  = 20
	finalFieldsV1  = 18
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

// finalCode is the record code (statusCodes) of final status st (versions
// 1 and 2 wrote all but sent, failed and expired out; no word is one
// letter, so one table reads every version).
func finalCode(st sms.Status) (string, bool) {
	code, ok := statusCodes[st]
	return code, ok && st.Terminal()
}

func fieldStatus(f string) sms.Status {
	if st, ok := codeStatuses[f]; ok && st.Terminal() {
		return st
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
// and send): what comes before them (ending in the separator before them)
// and what comes after them (empty, or the separator and the fields after
// them), so that a backend whose clock is elsewhere (redisq: Redis TIME
// inside a script) can put them in itself. m.Status must be final.
func FinalPrefix(m *sms.Message) (head, tail string, err error) {
	if !m.Status.Terminal() {
		return "", "", fmt.Errorf("final record of %s: status %q is not final", m.ID, m.Status)
	}
	status, ok := finalCode(m.Status)
	if !ok {
		return "", "", fmt.Errorf("final record of %s: no code for status %q", m.ID, m.Status)
	}
	base, ok := sms.IDTime(m.ID)
	if !ok {
		return "", "", fmt.Errorf("final record: malformed id %q", m.ID)
	}
	enc, segments := m.Encoding, m.Segments
	if m.Body != "" {
		seg := sms.CountSegments(m.Body)
		enc = seg.Encoding
		if segments == 0 {
			segments = seg.Count
		}
	}
	first := finalVersion + status + classDigit(m.Class)
	if enc == sms.UCS2 {
		first += "u"
	}
	if m.Callbacks {
		first += "w"
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
		first, oneOrB36(m.Attempts), oneOrB36(segments), clean(m.Producer), clean(m.Reference), clean(m.ProviderID),
		packMasked(sms.MaskPhone(m.To)), rel(m.ExpiresAt, m.CreatedAt),
	}
	head = strings.Join(fields, finalSep) + finalSep
	rest := []string{clean(m.LastError), hash, created, msOrEmpty(m.SendAt), clean(m.From), clean(m.CallbackURL), clean(m.BatchID)}
	for len(rest) > 0 && rest[len(rest)-1] == "" {
		rest = rest[:len(rest)-1]
	}
	if len(rest) > 0 {
		tail = finalSep + strings.Join(rest, finalSep)
	}
	return head, tail, nil
}

// oneOrB36 is n in base 36, "" for 1.
func oneOrB36(n int) string {
	if n == 1 {
		return ""
	}
	return b36(int64(n))
}

// packMasked writes each run of "*" in a masked number as "*" and its
// length in one base-36 digit (a masked number has only "+", digits and
// "*", so the digit after a "*" is always a length).
func packMasked(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '*' {
			b.WriteByte(s[i])
			i++
			continue
		}
		n := 0
		for i < len(s) && s[i] == '*' && n < 35 {
			n++
			i++
		}
		b.WriteByte('*')
		b.WriteString(b36(int64(n)))
	}
	return b.String()
}

// unpackMasked is the inverse of packMasked.
func unpackMasked(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '*' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return "", errors.New("masked number ends in a run without its length")
		}
		n, err := strconv.ParseInt(s[i+1:i+2], 36, 64)
		if err != nil {
			return "", err
		}
		b.WriteString(strings.Repeat("*", int(n)))
		i++
	}
	return b.String(), nil
}

func msOrEmpty(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return b36(t.UnixMilli())
}

// EncodeFinal is the final record of m with its own UpdatedAt and SentAt.
func EncodeFinal(m *sms.Message) (string, error) {
	head, tail, err := FinalPrefix(m)
	if err != nil {
		return "", err
	}
	base, _ := sms.IDTime(m.ID)
	tu, ts := rel(m.UpdatedAt, base), rel(m.SentAt, base)
	if ts == tu && ts != "" {
		ts = "="
	}
	return head + tu + finalSep + ts + tail, nil
}

// IsFinal reports whether a stored value is a final record.
func IsFinal(s string) bool {
	if strings.HasPrefix(s, "1"+finalSep) || strings.HasPrefix(s, "2"+finalSep) {
		return true
	}
	return len(s) >= 3 && strings.HasPrefix(s, finalVersion) && !strings.Contains(s[:3], finalSep)
}

// finalV3 returns the fields of a final record in version 3's layout, all
// finalFields, converting a version 1 or 2 record.
func finalV3(id, s string) ([]string, error) {
	f := strings.Split(s, finalSep)
	switch {
	case len(f) >= finalFieldsMin && len(f) <= finalFields && strings.HasPrefix(f[0], finalVersion) && len(f[0]) >= 3:
		return append(f, make([]string, finalFields-len(f))...), nil
	case len(f) == finalFieldsV1 && f[0] == "1":
		// version 1: no callback fields; the layout of version 2 otherwise
		f = append(f[:16:16], "", "", f[16], f[17])
	case len(f) == finalFieldsV2 && f[0] == "2":
	default:
		return nil, fmt.Errorf("final record of %s: %d fields, version %q", id, len(f), f[0][:min(1, len(f[0]))])
	}
	status := f[1]
	if c, ok := finalCode(sms.Status(status)); ok {
		status = c // a word of version 1 or 2
	}
	if len(status) != 1 {
		return nil, fmt.Errorf("final record of %s: status %q", id, status)
	}
	first := finalVersion + status + f[2] + f[5]
	if f[16] == "1" {
		first += "w"
	}
	one := func(v string) string {
		if v == "1" {
			return ""
		}
		return v
	}
	return []string{first, one(f[3]), one(f[4]), f[6], f[7], f[8], packMasked(f[9]), f[14], f[18], f[19],
		f[10], f[11], f[12], f[13], f[15], f[17], ""}, nil
}

// DecodeFinal reads the final record of message id (any version).
func DecodeFinal(id, s string) (*sms.Message, error) {
	base, ok := sms.IDTime(id)
	if !ok {
		return nil, fmt.Errorf("final record: malformed id %q", id)
	}
	f, err := finalV3(id, s)
	if err != nil {
		return nil, err
	}
	flags := f[0][2:]
	class, ok := digitClass[flags[:1]]
	if !ok || strings.Trim(flags[1:], "uw") != "" {
		return nil, fmt.Errorf("final record of %s: class %q", id, flags)
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
	oneOr := func(s string) int {
		if s == "" {
			return 1
		}
		return int(num(s))
	}
	at := func(from time.Time, s string) time.Time {
		if s == "" {
			return time.Time{}
		}
		return from.Add(time.Duration(num(s)) * time.Millisecond)
	}
	to, err := unpackMasked(f[6])
	errs = append(errs, err)
	m := &sms.Message{
		ID: id, Status: fieldStatus(f[0][1:2]), Class: class, Attempts: oneOr(f[1]), Segments: oneOr(f[2]),
		Producer: f[3], Reference: f[4], ProviderID: f[5], To: to, LastError: f[10], RequestHash: f[11],
		From: f[14], Callbacks: strings.Contains(flags, "w"), CallbackURL: f[15], Encoding: sms.GSM7, BatchID: f[16],
	}
	m.CreatedAt = base.Add(time.Duration(num(f[12])) * time.Millisecond)
	if f[13] != "" {
		m.SendAt = time.UnixMilli(num(f[13])).UTC()
	}
	m.ExpiresAt = at(m.CreatedAt, f[7])
	m.UpdatedAt = at(base, f[8])
	if f[9] == "=" {
		m.SentAt = m.UpdatedAt
	} else {
		m.SentAt = at(base, f[9])
	}
	if strings.Contains(flags, "u") {
		m.Encoding = sms.UCS2
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("final record of %s: %w", id, err)
	}
	return m, nil
}

// crockford is the alphabet of message ids (sms.NewID).
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// FinalShort is how a final LIST element of redisq names its message
// (version 3): 12 bytes, the id's last 18 characters (the creation time's
// last 10 bits, ms mod 1024, then the 80 random bits) as 10 + 40 + 40
// bits, big-endian in 2 + 5 + 5 bytes. The rest of the id, its creation
// time's other bits, is the list's own second. "" for a malformed id.
func FinalShort(id string) string {
	if !sms.ValidID(id) {
		return ""
	}
	var out [12]byte
	put := func(dst []byte, chars string) {
		var v uint64
		for i := range len(chars) {
			v = v<<5 | uint64(strings.IndexByte(crockford, chars[i]))
		}
		for i := len(dst) - 1; i >= 0; i-- {
			dst[i] = byte(v)
			v >>= 8
		}
	}
	put(out[:2], id[12:14])
	put(out[2:7], id[14:22])
	put(out[7:], id[22:30])
	return string(out[:])
}

// FinalID is the id of a message created in Unix second sec whose
// FinalShort is short; ok is false when there is none.
func FinalID(sec int64, short string) (id string, ok bool) {
	if len(short) != 12 {
		return "", false
	}
	get := func(src string, n int) (string, bool) {
		var v uint64
		for i := range len(src) {
			v = v<<8 | uint64(src[i])
		}
		if v>>(5*n) != 0 {
			return "", false
		}
		out := make([]byte, n)
		for i := n - 1; i >= 0; i-- {
			out[i] = crockford[v&31]
			v >>= 5
		}
		return string(out), true
	}
	low, ok1 := get(short[:2], 2)
	mid, ok2 := get(short[2:7], 8)
	end, ok3 := get(short[7:], 8)
	if !ok1 || !ok2 || !ok3 {
		return "", false
	}
	lowMS := int64(strings.IndexByte(crockford, low[0])<<5 | strings.IndexByte(crockford, low[1])) // ms mod 1024
	ms := sec*1000 + ((lowMS-sec*1000)%1024+1024)%1024
	if ms >= (sec+1)*1000 {
		return "", false
	}
	var head [8]byte
	for i, v := 7, ms>>10; i >= 0; i-- {
		head[i] = crockford[v&31]
		v >>= 5
	}
	id = "msg_" + string(head[:]) + low + mid + end
	return id, sms.ValidID(id)
}
