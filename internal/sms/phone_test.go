package sms

import (
	"errors"
	"strings"
	"testing"
)

func wantField(t *testing.T, err error, field string) {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %v (%T) is not a *ValidationError", err, err)
	}
	if ve.Field != field || !strings.HasPrefix(ve.Error(), field+": ") {
		t.Fatalf("error %q names field %q, want %q", ve.Error(), ve.Field, field)
	}
}

func TestParseE164(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string // want "" means rejected
	}{
		{"+819012345678", "+819012345678"}, // JP mobile
		{"+81312345678", "+81312345678"},   // JP Tokyo landline
		{"+12025550123", "+12025550123"},   // US
		{"+447911123456", "+447911123456"}, // UK mobile
		{"+442079460000", "+442079460000"}, // UK London
		{"+80012345678", "+80012345678"},   // international freephone
		// A trunk prefix written after the country code is normalized away.
		{"+4402079460000", "+442079460000"},
		{"+8109012345678", "+819012345678"},

		// Shape.
		{"", ""},
		{"+", ""},
		{"+1234567", ""},          // 7 digits
		{"+1234567890123456", ""}, // 16 digits
		{"819012345678", ""},      // no +
		{"00819012345678", ""},    // international prefix instead of +
		{"++819012345678", ""},
		{"+81 90 1234 5678", ""},
		{"+81-90-1234-5678", ""},
		{"+(81)9012345678", ""},
		{" +819012345678", ""},
		{"+819012345678 ", ""},
		{"+819012345678\n", ""},
		{"+81901234567a", ""},
		{"+8190123456７8", ""}, // fullwidth digit
		{"+٨١٩٠١٢٣٤٥٦٧٨", ""}, // Arabic-Indic digits
		{"tel:+819012345678", ""},

		// Right shape, but the library says no.
		{"+0081901234567", ""}, // leading 00 after the +
		{"+15555555555", ""},   // no such US area code
		{"+8190123456789", ""}, // one digit too many for a JP mobile
		{"+81901234567", ""},   // one digit too few
		{"+999123456789", ""},  // unassigned country code
		{"+12345678", ""},
		{"+49040000", ""}, // valid, but only 7 digits once the trunk 0 is dropped
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseE164(tt.in)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("ParseE164(%q) = %q, want an error", tt.in, got)
				}
				wantField(t, err, "to")
				if len(tt.in) > 2 && strings.Contains(err.Error(), tt.in) {
					t.Errorf("error %q repeats the input", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseE164(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func FuzzParseE164(f *testing.F) {
	for _, s := range []string{"+819012345678", "+4402079460000", "+15555555555", "+", "", "00819012345678", "+81 90", "+٨١٩"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseE164(s)
		if err != nil {
			wantField(t, err, "to")
			return
		}
		if !e164Shape(s) {
			t.Fatalf("accepted %q, which is not strict E.164", s)
		}
		if !e164Shape(got) {
			t.Fatalf("ParseE164(%q) returned %q, not E.164", s, got)
		}
		again, err := ParseE164(got)
		if err != nil || again != got {
			t.Fatalf("ParseE164(%q) = %q, %v; not stable on its own output", got, again, err)
		}
		if ValidateSender(got) != nil {
			t.Fatalf("a valid recipient %q is refused as sender", got)
		}
	})
}

func BenchmarkParseE164(b *testing.B) {
	for b.Loop() {
		if _, err := ParseE164("+819012345678"); err != nil {
			b.Fatal(err)
		}
	}
}

func TestValidateSender(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in string
		ok bool
	}{
		{"", true}, // provider default
		{"+819012345678", true},
		{"+4402079460000", true},
		{"+15555555555", false}, // invalid number
		{"+8190 1234", false},
		{"+1234", false},
		{"123", true}, // short codes
		{"12345", true},
		{"12345678", true},
		{"12", false},
		{"123456789", false}, // a long number needs the +
		{"819012345678", false},
		{"A", true},
		{"ACME", true},
		{"Acme Bank", true},
		{"ACME1234567", true}, // 11
		{"1A", true},
		{"ACME12345678", false}, // 12
		{"ACME-Bank", false},
		{"AT&T", false},
		{"Dr.Smith", false},
		{"ACME_", false},
		{"12 34", false}, // no letter
		{" ", false},
		{" ACME", false},
		{"ACME ", false},
		{"Café", false},
		{"ＡＣＭＥ", false}, // fullwidth
		{"ACME\n", false},
		{"AC\x00ME", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			err := ValidateSender(tt.in)
			if tt.ok {
				if err != nil {
					t.Fatalf("ValidateSender(%q) = %v, want nil", tt.in, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateSender(%q) = nil, want an error", tt.in)
			}
			wantField(t, err, "from")
		})
	}
}

func TestMaskPhone(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"+819012345678", "+8190****5678"},
		{"+12025550123", "+120****0123"},
		{"+8190123456789", "+8190*****6789"},
		{"+1234567890123456", "+1234********3456"},
		{"+123456789", "+1****6789"},
		{"+12345678", "*********"},
		{"12345", "*****"},
		{"", ""},
		{"+81\n01234\x1b5678", "+81*0*****5678"},
		{"あいうえおかきくけこ", "**********"},
	}
	for _, tt := range tests {
		if got := MaskPhone(tt.in); got != tt.want {
			t.Errorf("MaskPhone(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
