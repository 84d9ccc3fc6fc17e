package sms

import (
	"errors"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nyaruka/phonenumbers"
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

var parseE164Tests = []struct {
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

func TestParseE164(t *testing.T) {
	t.Parallel()
	for _, tt := range parseE164Tests {
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

// referenceParseE164 is parseE164 as it was before validE164: the
// library's general parser. The fast path must answer exactly like it.
func referenceParseE164(field, s string) (string, error) {
	if !e164Shape(s) {
		return "", invalid(field, "must be E.164: '+' then 8 to 15 digits, with no spaces or other characters")
	}
	num, err := phonenumbers.Parse(s, "")
	if err != nil || !phonenumbers.IsValidNumber(num) {
		return "", invalid(field, "is not a valid phone number")
	}
	out := phonenumbers.Format(num, phonenumbers.E164)
	if !e164Shape(out) {
		return "", invalid(field, "is not a valid phone number")
	}
	return out, nil
}

// sameAsReference fails t unless ParseE164(s) answers exactly like the
// reference: the same number, or the same error.
func sameAsReference(t *testing.T, s string) {
	t.Helper()
	want, wantErr := referenceParseE164("to", s)
	got, err := ParseE164(s)
	if got != want || errString(err) != errString(wantErr) {
		t.Fatalf("ParseE164(%q) = %q, %v; the library's parser gives %q, %v", s, got, err, want, wantErr)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// parseE164Corpus returns inputs that reach every branch of parseDigits:
// the test vectors; the library's example number of every region and
// non-geographical code for every number type, as is, with a digit more or
// less, and behind one- and two-digit prefixes (trunk prefixes, carrier
// codes, leading zeros: every one of them behind each calling code);
// random digits after every calling code, and random digits alone.
//
// sampled (under the race detector, which makes the library's parser some
// twenty times slower) keeps every example number with its digit more and
// less, and behind each calling code's first example every one-digit
// prefix, every two-digit one the main region's national prefix for
// parsing matches the start of (the library's metadata picks them: the
// prefixes that reach the stripping branches), and ten others; behind the
// other examples, of the prefixes the full corpus puts there, those the
// national prefix matches, and two more.
// The full corpus is the one without the race detector.
func parseE164Corpus(perCode int, sampled bool) []string {
	var in []string
	for _, tt := range parseE164Tests {
		in = append(in, tt.in)
	}
	var examples []*phonenumbers.PhoneNumber
	for _, region := range slices.Sorted(maps.Keys(phonenumbers.GetSupportedRegions())) {
		for typ := phonenumbers.FIXED_LINE; typ <= phonenumbers.UNKNOWN; typ++ {
			examples = append(examples, phonenumbers.GetExampleNumberForType(region, typ))
		}
	}
	for _, code := range slices.Sorted(maps.Keys(phonenumbers.GetSupportedGlobalNetworkCallingCodes())) {
		examples = append(examples, phonenumbers.GetExampleNumberForNonGeoEntity(code))
	}
	var prefixes []string
	for i := range 110 {
		if i < 10 {
			prefixes = append(prefixes, strconv.Itoa(i))
		} else {
			prefixes = append(prefixes, strconv.Itoa(100 + i - 10)[1:])
		}
	}
	// Every prefix goes behind the first example of each calling code;
	// behind the others (the library's parser is slow, more so under the
	// race detector) every one-digit prefix and ten two-digit ones, a
	// different ten for each example of the code.
	seen := map[string]bool{}
	perCC := map[string]int{}
	for _, num := range examples {
		if num == nil {
			continue
		}
		cc := strconv.Itoa(int(num.GetCountryCode()))
		nsn := phonenumbers.GetNationalSignificantNumber(num)
		if seen[cc+" "+nsn] {
			continue
		}
		seen[cc+" "+nsn] = true
		in = append(in, "+"+cc+nsn, "+"+cc+nsn+"0", "+"+cc+nsn[:len(nsn)-1])
		k := perCC[cc]
		perCC[cc]++
		strips := nationalPrefixOf(int(num.GetCountryCode()))
		for i, p := range prefixes {
			keep := k == 0 || i < 10 || (i-10)%10 == k%10
			if sampled {
				c := int(num.GetCountryCode())
				if k == 0 {
					keep = i < 10 || (i-10)%10 == c%10 || strips(p+nsn)
				} else {
					keep = i == (c+k)%10 || i == 10+(7*c+13*k)%100 || (i < 10 || (i-10)%10 == k%10) && strips(p+nsn)
				}
			}
			if keep {
				in = append(in, "+"+cc+p+nsn)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	digits := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('0' + rng.IntN(10))
		}
		return string(b)
	}
	for _, code := range slices.Sorted(maps.Keys(phonenumbers.GetSupportedCallingCodes())) {
		cc := strconv.Itoa(code)
		for range perCode {
			n := 8 + rng.IntN(8) - len(cc)
			in = append(in, "+"+cc+digits(n), "+"+cc+"0"+digits(n-1), "+"+cc+"00"+digits(n-2))
		}
	}
	for range 20 * perCode {
		in = append(in, "+"+digits(8+rng.IntN(8)))
	}
	return in
}

// nationalPrefixOf reports whether the national prefix for parsing of
// code's main region, by the library's metadata, matches at the start of
// the national digits given.
func nationalPrefixOf(code int) func(digits string) bool {
	region := phonenumbers.GetRegionCodeForCountryCode(code)
	var npfp string
	if coll, err := phonenumbers.MetadataCollection(); err == nil {
		for _, m := range coll.GetMetadata() {
			if m.GetId() == region && (region != "001" || int(m.GetCountryCode()) == code) {
				npfp = m.GetNationalPrefixForParsing()
			}
		}
	}
	if npfp == "" {
		return func(string) bool { return false }
	}
	re := regexp.MustCompile("^(?:" + npfp + ")")
	return func(digits string) bool {
		m := re.FindStringIndex(digits)
		return m != nil && m[1] > 0
	}
}

func TestParseE164MatchesLibraryParser(t *testing.T) {
	t.Parallel()
	perCode := 40
	if testing.Short() || raceDetector {
		perCode = 4
	}
	corpus := parseE164Corpus(perCode, raceDetector)
	accepted, normalized := 0, 0
	for _, s := range corpus {
		sameAsReference(t, s)
		if out, err := ParseE164(s); err == nil {
			accepted++
			if out != s {
				normalized++
			}
		}
	}
	// A corpus that the shape check or the calling code rejects whole
	// would prove nothing (the full one has ~4,000 and ~1,070, the sampled
	// one ~2,170 and ~750).
	t.Logf("%d inputs: %d accepted, %d of them normalized", len(corpus), accepted, normalized)
	if accepted < 2000 || normalized < 500 {
		t.Fatalf("corpus too weak: %d of %d accepted, %d normalized", accepted, len(corpus), normalized)
	}
}

func FuzzParseE164(f *testing.F) {
	for _, s := range []string{
		"+819012345678", "+4402079460000", "+15555555555", "+", "", "00819012345678", "+81 90", "+٨١٩",
		"+390612345678", "+3900000000", "+5491123456789", "+78123456789", "+5502112345678", "+80012345678",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sameAsReference(t, s)
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

// BenchmarkParseE164 compares the fast path (new) with the library's parser
// (old) on a mix of valid numbers, one with a trunk prefix to drop.
func BenchmarkParseE164(b *testing.B) {
	numbers := []string{"+819012345678", "+12025550123", "+447911123456", "+4402079460000", "+390612345678", "+5491123456789", "+4915123456789", "+33612345678"}
	for _, bb := range []struct {
		name  string
		parse func(string) (string, error)
	}{
		{"old", func(s string) (string, error) { return referenceParseE164("to", s) }},
		{"new", ParseE164},
	} {
		b.Run(bb.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				if _, err := bb.parse(numbers[i%len(numbers)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
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

// TestFirstDigitsNeverRulesOutAMatch: the first-digit set of every
// compiled number description holds the first digit of every number its
// pattern matches, tried on each description's example number and on
// variants of it with other leading digits and lengths; and it does rule
// descriptions out (else it would only cost).
func TestFirstDigitsNeverRulesOutAMatch(t *testing.T) {
	t.Parallel()
	coll, err := phonenumbers.MetadataCollection()
	if err != nil {
		t.Fatal(err)
	}
	tried, narrowed := 0, 0
	for _, m := range coll.GetMetadata() {
		for _, d := range []*phonenumbers.PhoneNumberDesc{m.GetGeneralDesc(), m.GetFixedLine(), m.GetMobile(), m.GetTollFree(),
			m.GetPremiumRate(), m.GetSharedCost(), m.GetPersonalNumber(), m.GetVoip(), m.GetPager(), m.GetUan(), m.GetVoicemail()} {
			if d == nil {
				continue
			}
			nd := newNumberDesc(d)
			if nd.first != anyDigit {
				narrowed++
			}
			ex := d.GetExampleNumber()
			if ex == "" {
				ex = "1234567890"
			}
			for lead := range 10 {
				for _, n := range []string{ex, ex[1:], ex + "0", ex + "00"} {
					s := strconv.Itoa(lead) + n[min(1, len(n)):]
					tried++
					if nd.pattern.MatchString(s) && nd.first&(1<<lead) == 0 {
						t.Fatalf("%s: %q matches %s, but its first digit is not in %010b", m.GetId(), s, nd.pattern, nd.first)
					}
				}
			}
		}
	}
	if narrowed == 0 || tried < 10000 {
		t.Fatalf("%d descriptions narrowed, %d numbers tried", narrowed, tried)
	}
	t.Logf("%d numbers tried, %d descriptions narrowed", tried, narrowed)
	for _, tc := range []struct {
		expr string
		want uint16
	}{
		{"^(?:[2-9]\\d{9})$", 0b1111111100}, {"^(?:1|(?:3|5)\\d)$", 0b101010}, {"^(?:\\d?1)$", anyDigit},
		{"^(?:(?:12)?4\\d)$", 0b10010}, {"^(?:NA)$", 0}, {"^(?:)$", anyDigit}, {"^(?:7{2,3})$", 0b10000000},
	} {
		if got := firstDigitsOf(tc.expr); got != tc.want {
			t.Errorf("firstDigitsOf(%s) = %010b, want %010b", tc.expr, got, tc.want)
		}
	}
}

// FuzzValidateSender: any input is either accepted as one of the kinds of
// sender, told apart here by a rule of their own, or refused naming
// "from" without repeating the input.
func FuzzValidateSender(f *testing.F) {
	for _, s := range []string{"", "ACME", "Acme Bank", "ACME1234567", "ACME12345678", "123", "123456789", "+819012345678",
		"+4402079460000", "12 34", " ACME", "Café", "AC\x00ME", "+", "+1", "\xff", "A\u200bB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateSender(s)
		if err != nil {
			wantField(t, err, "from")
			// No number in an error: the reasons hold fewer than five
			// digits, so an input with five or more must not be in one.
			digits := 0
			for _, r := range s {
				if r >= '0' && r <= '9' {
					digits++
				}
			}
			if digits >= 5 && strings.Contains(err.Error(), s) {
				t.Fatalf("error %q repeats the input", err)
			}
		}
		var want bool
		switch {
		case s == "":
			want = true
		case s[0] == '+':
			_, perr := ParseE164(s)
			want = perr == nil
		case strings.Trim(s, "0123456789") == "":
			want = len(s) >= 3 && len(s) <= 8
		default:
			want = len(s) <= 11 && strings.Trim(s, " ") == s &&
				strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 ") == "" &&
				strings.ContainsAny(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
		}
		if (err == nil) != want {
			t.Fatalf("ValidateSender(%q) = %v, want accepted=%v", s, err, want)
		}
	})
}

// TestNormalizeSender: an E.164 sender comes back as ParseE164 writes it;
// the others as they are; what ValidateSender refuses, it refuses.
func TestNormalizeSender(t *testing.T) {
	for in, want := range map[string]string{
		"+4402079460000": "+442079460000", "+442079460000": "+442079460000",
		"ACME": "ACME", "Acme Bank": "Acme Bank", "12345": "12345", "": "",
	} {
		if got, err := NormalizeSender(in); err != nil || got != want {
			t.Errorf("NormalizeSender(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"+81 90", "ACME!", "12", "TwelveChars1"} {
		if _, err := NormalizeSender(bad); err == nil || ValidateSender(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
