package provider

import (
	"errors"
	"strings"
	"testing"
)

func TestScrub(t *testing.T) {
	const body = "Your code is 123456\nDo not share it"
	for _, tc := range []struct{ in, gone, kept string }{
		{"The 'To' number +819012345678 is not a valid phone number.", "9012345678", "is not a valid phone number"},
		{"Invalid number 090-1234-5678", "1234-567", "Invalid number 090"},
		{"bad destination (090) 1234 5678", "1234 5678", "bad destination"},
		{"Non-Whitelisted Destination 819012345678", "9012345678", "Non-Whitelisted Destination"},
		{"Error 21211: refused", "", "Error 21211: refused"},
		{"rejected text: Your code is 123456\nDo not share it", "123456", "rejected text: [body]"},
		{"text 'Do not share it' refused", "Do not share it", "[body]"},
	} {
		got := Scrub(tc.in, body)
		if tc.gone != "" && strings.Contains(got, tc.gone) {
			t.Errorf("Scrub(%q) = %q still holds %q", tc.in, got, tc.gone)
		}
		if !strings.Contains(got, tc.kept) {
			t.Errorf("Scrub(%q) = %q lost %q", tc.in, got, tc.kept)
		}
	}
}

func TestScrubbedKeepsClass(t *testing.T) {
	pe := &Error{Reason: ReasonRejected, Status: 400, Message: "number +819012345678 invalid"}
	err := Scrubbed(pe, "hi")
	got := AsError(err)
	if got == nil || got.Reason != ReasonRejected || got.Status != 400 || strings.Contains(got.Message, "9012345678") ||
		strings.Contains(err.Error(), "9012345678") {
		t.Fatalf("Scrubbed = %v (%+v)", err, got)
	}
	if pe.Message != "number +819012345678 invalid" {
		t.Error("Scrubbed changed the original")
	}
	plain := errors.New("dial +819012345678")
	if s := Scrubbed(plain, ""); !errors.Is(s, plain) || strings.Contains(s.Error(), "9012345678") {
		t.Errorf("Scrubbed(plain) = %v", s)
	}
}
