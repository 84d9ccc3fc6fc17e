package sms

import (
	"testing"

	"github.com/nyaruka/phonenumbers"
)

// TestDestinationOf: region and type as libphonenumber gives them,
// including numbers of no country and types protection blocks.
func TestDestinationOf(t *testing.T) {
	t.Parallel()
	premium := phonenumbers.Format(phonenumbers.GetExampleNumberForType("GB", phonenumbers.PREMIUM_RATE), phonenumbers.E164)
	for in, want := range map[string]Destination{
		"+819012345678": {"JP", NumberMobile},
		premium:         {"GB", NumberPremiumRate},
		"+37121234567":  {"LV", NumberMobile},
		"+88216123456":  {RegionNonGeo, NumberVoIP},
		"+12025550123":  {"US", NumberFixedLineOrMobile},
		"+447400123456": {"GB", NumberMobile},
	} {
		if got := DestinationOf(in); got != want {
			t.Errorf("DestinationOf(%s) = %+v, want %+v", in, got, want)
		}
	}
	if !ValidRegion("JP") || ValidRegion("jp") || ValidRegion("ZZ") || ValidRegion(RegionNonGeo) {
		t.Error("ValidRegion accepts a bad code or refuses JP")
	}
	for _, nt := range NumberTypes {
		if !ValidNumberType(string(nt)) {
			t.Errorf("%s not valid", nt)
		}
	}
	if ValidNumberType("premium") {
		t.Error("premium accepted")
	}
}

// TestNumberPrefixNeverWhole: the velocity alarm's range is never a whole
// number, whatever digits asks for.
func TestNumberPrefixNeverWhole(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{{"+819012345678", 5, "+81901"}, {"+819012345678", 20, "+8190123"}, {"+12345678", 9, "+1234567"}, {"+819012345678", 0, ""}} {
		if got := NumberPrefix(c.in, c.n); got != c.want {
			t.Errorf("NumberPrefix(%s, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

// libraryDestination is what DestinationOf must answer, from the library.
func libraryDestination(e164 string) Destination {
	num, err := phonenumbers.Parse(e164, "")
	if err != nil {
		return Destination{Type: NumberUnknown}
	}
	d := Destination{Region: phonenumbers.GetRegionCodeForNumber(num), Type: NumberTypes[phonenumbers.GetNumberType(num)]}
	if d.Region == "ZZ" {
		d.Region = ""
	}
	return d
}

// TestDestinationOfMatchesLibrary: the same region and type as the
// library for every example number of every region and type, and for
// variations of their next-to-last digit (valid or not).
func TestDestinationOfMatchesLibrary(t *testing.T) {
	t.Parallel()
	var numbers []string
	for region := range phonenumbers.GetSupportedRegions() {
		for pt := phonenumbers.FIXED_LINE; pt < phonenumbers.UNKNOWN; pt++ {
			ex := phonenumbers.GetExampleNumberForType(region, pt)
			if ex == nil {
				continue
			}
			n := phonenumbers.Format(ex, phonenumbers.E164)
			numbers = append(numbers, n)
			for _, d := range "059" {
				numbers = append(numbers, n[:len(n)-2]+string(d)+n[len(n)-1:])
			}
		}
	}
	for _, code := range []int{800, 808, 870, 878, 881, 882, 883, 888, 979} {
		for pt := phonenumbers.FIXED_LINE; pt < phonenumbers.UNKNOWN; pt++ {
			if ex := phonenumbers.GetExampleNumberForNonGeoEntity(code); ex != nil {
				numbers = append(numbers, phonenumbers.Format(ex, phonenumbers.E164))
			}
		}
	}
	checked := 0
	for _, in := range numbers {
		n, err := ParseE164(in) // DestinationOf is only ever asked about these
		if err != nil {
			continue
		}
		checked++
		if got, want := DestinationOf(n), libraryDestination(n); got != want {
			t.Errorf("DestinationOf(%s) = %+v, the library says %+v", n, got, want)
		}
	}
	if checked < 5000 {
		t.Fatalf("only %d valid example numbers", checked)
	}
	t.Logf("%d numbers checked", checked)
}

// BenchmarkDestinationOf is the cost protection adds to every message
// (region and type), against the library's own Parse and lookups.
func BenchmarkDestinationOf(b *testing.B) {
	DestinationOf("+819012345678") // compile the metadata outside the loop
	b.Run("library", func(b *testing.B) {
		for b.Loop() {
			libraryDestination("+819012345678")
		}
	})
	b.Run("ours", func(b *testing.B) {
		for b.Loop() {
			DestinationOf("+819012345678")
		}
	})
}
