package sms

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ValidateBody checks a message body and counts its segments. It rejects:
// invalid UTF-8; an empty or all-whitespace body; control characters
// (Unicode category Cc: C0, DEL, C1) other than newline, where a carriage
// return is accepted only as part of CRLF; and a body of more than
// maxSegments segments (maxSegments <= 0 means no limit).
//
// Tab is rejected: it is not in GSM-7, so one tab would silently turn a
// message into UCS-2 and more than double its cost. A lone CR and form feed
// are rejected because handsets render them inconsistently, even though
// CountSegments can count them.
//
// On a body with too many segments the returned Segments is filled in, so the
// caller can say how many there were.
//
// The UTF-8 check here cannot see what a JSON decoder already replaced:
// encoding/json turns invalid bytes and escaped lone surrogates into U+FFFD
// without an error. Check the raw request with ValidUTF8JSON before decoding.
func ValidateBody(body string, maxSegments int) (Segments, error) {
	if !utf8.ValidString(body) {
		return Segments{}, invalid("body", "is not valid UTF-8")
	}
	blank := true
	for i, r := range body {
		if r == '\r' && i+1 < len(body) && body[i+1] == '\n' {
			continue
		}
		if unicode.IsControl(r) && r != '\n' {
			return Segments{}, invalid("body", fmt.Sprintf("contains control character %U; only newline (or CRLF) is allowed", r))
		}
		if !unicode.IsSpace(r) {
			blank = false
		}
	}
	if blank {
		return Segments{}, invalid("body", "is empty or only whitespace")
	}
	s := CountSegments(body)
	if maxSegments > 0 && s.Count > maxSegments {
		return s, invalid("body", fmt.Sprintf("needs %d %s segments; at most %d are allowed", s.Count, s.Encoding, maxSegments))
	}
	return s, nil
}

// ValidUTF8JSON reports whether the raw JSON text raw will decode without
// encoding/json silently replacing anything with U+FFFD: raw must be valid
// UTF-8 and hold no \u escape of a lone surrogate (an unpaired \uD800–\uDBFF
// or a bare \uDC00–\uDFFF). The gateway calls it on the whole request body
// before decoding and answers 400 when it is false. Other syntax errors are
// left to the decoder.
func ValidUTF8JSON(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	// A backslash is only legal inside a JSON string, so scanning every
	// escape without tracking string boundaries is enough.
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if i+1 >= len(raw) || raw[i+1] != 'u' {
			i++ // skip the escaped character, which may be a backslash
			continue
		}
		r, ok := hex4(raw[i+2:])
		switch {
		case !ok:
			i++
		case r >= 0xDC00 && r <= 0xDFFF:
			return false
		case r >= 0xD800 && r <= 0xDBFF:
			rest := raw[i+6:]
			if len(rest) < 2 || rest[0] != '\\' || rest[1] != 'u' {
				return false
			}
			lo, ok := hex4(rest[2:])
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return false
			}
			i += 11
		default:
			i += 5
		}
	}
	return true
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// CheckFormatControls refuses a body that holds an invisible format
// character (Unicode category Cf, and U+180E): the bidirectional controls
// (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C), which can make a
// text read differently from what it says, and the zero-width ones
// (U+200B–U+200D, U+2060, U+FEFF), which hide inside codes and links and
// switch the whole message to UCS-2 (70 characters a segment instead of
// 160). The error names the first one's code point and position.
func CheckFormatControls(body string) error {
	return checkInvisible("body", body, "remove it (or allow such characters for the producer: producers[].allow_unicode_controls)")
}

// ValidateReference checks the producer's own reference: at most maxLen
// bytes, no control character, and no invisible format character, refused
// as in a body (checkInvisible) and with no producer allowance: the
// reference is shown back to operators and producers (the dashboard,
// status callbacks), never sent to a recipient, so no language needs one.
func ValidateReference(ref string, maxLen int) error {
	switch {
	case len(ref) > maxLen:
		return invalid("reference", fmt.Sprintf("has at most %d bytes", maxLen))
	case strings.ContainsFunc(ref, unicode.IsControl):
		return invalid("reference", "must not contain control characters")
	}
	return checkInvisible("reference", ref, "remove it")
}

// checkInvisible refuses s, the value of field, when it holds an invisible
// format character (Unicode category Cf, and U+180E), naming the first
// one's code point and position, then what to do (hint).
func checkInvisible(field, s, hint string) error {
	n := 0
	for _, r := range s {
		n++
		if unicode.Is(unicode.Cf, r) || r == '\u180e' {
			return invalid(field, fmt.Sprintf("contains %U, an invisible bidirectional or zero-width character, at character %d; %s", r, n, hint))
		}
	}
	return nil
}
