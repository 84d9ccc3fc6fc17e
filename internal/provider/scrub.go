package provider

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"smsgw/internal/sms"
)

// Scrub removes from a provider's text (an error message, a vendor
// description) the message's body and every phone number, so the text can
// be stored (last_error, dead letters), shown (admin API, dashboard) and
// logged. It is the one scrub of provider text: the send loop applies it to
// every provider answer of both send paths before anything else sees it.
//
//   - the body, whole, and each of its lines of 6 or more characters, is
//     replaced by "[body]" (vendors quote the text they refused);
//   - every run of 6 or more digits, with the separators numbers are
//     written with (spaces, '-', '.', '(', ')', and a leading '+'), is
//     masked like a number in our logs (sms.MaskPhone): the recipient in
//     E.164, national or grouped form, and anyone else's number alike.
func Scrub(text, body string) string {
	if text == "" {
		return text
	}
	if body != "" {
		text = strings.ReplaceAll(text, body, "[body]")
		for _, line := range strings.FieldsFunc(body, func(r rune) bool { return r == '\n' || r == '\r' }) {
			if line = strings.TrimSpace(line); utf8.RuneCountInString(line) >= 6 {
				text = strings.ReplaceAll(text, line, "[body]")
			}
		}
	}
	return maskDigitRuns(text)
}

// minDigits is the shortest digit run Scrub masks: shorter than any phone
// number (E.164 allows 8 digits with the country code, some national
// numbers fewer), longer than a vendor error code (Twilio's are 5 digits).
const minDigits = 6

// maskDigitRuns masks every run of at least minDigits digits written with
// number separators.
func maskDigitRuns(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i := 0; i < len(rs); {
		opensNumber := (rs[i] == '+' || rs[i] == '(') && i+1 < len(rs) && unicode.IsDigit(rs[i+1])
		if !unicode.IsDigit(rs[i]) && !opensNumber {
			b.WriteRune(rs[i])
			i++
			continue
		}
		// A run: digits and separators, ending on a digit.
		j, last, digits := i, i, 0
		for j < len(rs) && (unicode.IsDigit(rs[j]) || strings.ContainsRune("+-. ()", rs[j]) && j > i || j == i) {
			if unicode.IsDigit(rs[j]) {
				digits++
				last = j
			}
			j++
		}
		run := string(rs[i : last+1])
		if digits >= minDigits {
			b.WriteString(sms.MaskPhone(run))
		} else {
			b.WriteString(run)
		}
		i = last + 1
	}
	return b.String()
}

// Scrubbed returns err with its text scrubbed (Scrub with body): a
// *Error keeps its classification, with its Message scrubbed; any other
// error keeps its chain for errors.Is but reads scrubbed.
func Scrubbed(err error, body string) error {
	if err == nil {
		return nil
	}
	if pe := AsError(err); pe != nil {
		c := *pe
		c.Message = Scrub(pe.Message, body)
		c.Accepted = append([]string(nil), pe.Accepted...)
		return &scrubbedError{text: Scrub(err.Error(), body), cause: &c}
	}
	return &scrubbedError{text: Scrub(err.Error(), body), cause: err}
}

type scrubbedError struct {
	text  string
	cause error
}

func (e *scrubbedError) Error() string { return e.text }
func (e *scrubbedError) Unwrap() error { return e.cause }
