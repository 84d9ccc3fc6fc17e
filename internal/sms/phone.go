package sms

import (
	"github.com/nyaruka/phonenumbers"
)

// ParseE164 checks a recipient number and returns it normalized to E.164.
// The input must already be strict E.164 — '+' then 8 to 15 ASCII digits,
// nothing else — and the number must be valid by libphonenumber's metadata.
// Normalization can still change it: a national trunk prefix written after
// the country code is dropped (+4402079460000 → +442079460000), so callers
// must store and compare the returned value, not the input. The result is
// itself strict E.164.
func ParseE164(s string) (string, error) { return parseE164("to", s) }

func parseE164(field, s string) (string, error) {
	if !e164Shape(s) {
		return "", invalid(field, "must be E.164: '+' then 8 to 15 digits, with no spaces or other characters")
	}
	num, err := phonenumbers.Parse(s, "")
	if err != nil || !phonenumbers.IsValidNumber(num) {
		return "", invalid(field, "is not a valid phone number")
	}
	// Dropping a trunk prefix can leave fewer than 8 digits (+49040000 →
	// +4940000); the result must still have the promised shape.
	out := phonenumbers.Format(num, phonenumbers.E164)
	if !e164Shape(out) {
		return "", invalid(field, "is not a valid phone number")
	}
	return out, nil
}

func e164Shape(s string) bool {
	return len(s) >= 1+8 && len(s) <= 1+15 && s[0] == '+' && allDigits(s[1:])
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ValidateSender checks the optional sender ("from"). Accepted:
//   - empty: the provider's default sender;
//   - E.164 ('+' then digits), checked like ParseE164;
//   - a short code of 3 to 8 digits;
//   - an alphanumeric sender id of 1 to 11 characters from A-Z, a-z, 0-9 and
//     space, with at least one letter and no leading or trailing space.
//
// No punctuation is accepted in sender ids: Twilio and Telnyx document only
// letters, digits and space, and carriers elsewhere strip or reject the
// rest, so refusing here is better than failing at send time.
func ValidateSender(s string) error {
	switch {
	case s == "":
		return nil
	case s[0] == '+':
		_, err := parseE164("from", s)
		return err
	case allDigits(s):
		if len(s) < 3 || len(s) > 8 {
			return invalid("from", "a numeric sender must be a short code of 3 to 8 digits, or E.164 starting with '+'")
		}
		return nil
	}
	if len(s) > 11 {
		return invalid("from", "an alphanumeric sender id has at most 11 characters")
	}
	if s[0] == ' ' || s[len(s)-1] == ' ' {
		return invalid("from", "an alphanumeric sender id must not start or end with a space")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == ' ') {
			return invalid("from", "an alphanumeric sender id may contain only letters A-Z, a-z, digits and spaces")
		}
	}
	// Not all digits (checked above) and only [A-Za-z0-9 ]: if it holds no
	// letter it mixes digits and spaces, which carriers read as a number.
	for i := 0; i < len(s); i++ {
		if c := s[i] | 0x20; c >= 'a' && c <= 'z' {
			return nil
		}
	}
	return invalid("from", "an alphanumeric sender id needs at least one letter")
}

// MaskPhone hides the middle of a phone number for logs: "+819012345678"
// becomes "+8190****5678". At least four characters are always hidden, and
// inputs shorter than 10 characters are masked entirely. Any kept character
// that is not a digit or '+' is masked too, so arbitrary input cannot inject
// anything into a log line.
func MaskPhone(s string) string {
	r := []rune(s)
	n := len(r)
	head, tail := 0, 0
	if n >= 10 {
		head, tail = min(5, n-8), 4
	}
	out := make([]byte, n)
	for i, c := range r {
		if (i < head || i >= n-tail) && (c == '+' || c >= '0' && c <= '9') {
			out[i] = byte(c)
		} else {
			out[i] = '*'
		}
	}
	return string(out)
}
