package sms

import (
	"slices"
	"strings"

	"github.com/nyaruka/phonenumbers"
)

// NumberType is the kind of line a number reaches, from libphonenumber's
// metadata: what protection.block_number_types names.
type NumberType string

// The number types, libphonenumber's PhoneNumberType in lower case.
// FixedLineOrMobile is a number whose region cannot tell the two apart
// (every US and Canadian number).
const (
	NumberFixedLine         NumberType = "fixed_line"
	NumberMobile            NumberType = "mobile"
	NumberFixedLineOrMobile NumberType = "fixed_line_or_mobile"
	NumberTollFree          NumberType = "toll_free"
	NumberPremiumRate       NumberType = "premium_rate"
	NumberSharedCost        NumberType = "shared_cost"
	NumberVoIP              NumberType = "voip"
	NumberPersonal          NumberType = "personal_number"
	NumberPager             NumberType = "pager"
	NumberUAN               NumberType = "uan"
	NumberVoicemail         NumberType = "voicemail"
	NumberUnknown           NumberType = "unknown"
)

// NumberTypes lists every NumberType, indexed by libphonenumber's
// PhoneNumberType.
var NumberTypes = []NumberType{
	NumberFixedLine, NumberMobile, NumberFixedLineOrMobile, NumberTollFree, NumberPremiumRate,
	NumberSharedCost, NumberVoIP, NumberPersonal, NumberPager, NumberUAN, NumberVoicemail, NumberUnknown,
}

// ValidNumberType reports whether s names a NumberType.
func ValidNumberType(s string) bool { return slices.Contains(NumberTypes, NumberType(s)) }

// RegionNonGeo is the region of numbers that belong to no country:
// satellite and international networks (+870, +881, +882, +883...).
const RegionNonGeo = "001"

// ValidRegion reports whether s is an ISO 3166-1 alpha-2 region code
// libphonenumber has numbers for ("JP", "GB"; upper case).
func ValidRegion(s string) bool {
	return len(s) == 2 && s == strings.ToUpper(s) && phonenumbers.GetSupportedRegions()[s]
}

// Destination is where a number leads: its region (ISO 3166-1 alpha-2;
// RegionNonGeo for a non-geographic network; "" when unknown) and its type.
type Destination struct {
	Region string
	Type   NumberType
}

// DestinationOf looks up e164, a number ParseE164 returned.
func DestinationOf(e164 string) Destination {
	num, err := phonenumbers.Parse(e164, "")
	if err != nil {
		return Destination{Type: NumberUnknown}
	}
	d := Destination{Region: phonenumbers.GetRegionCodeForNumber(num), Type: NumberUnknown}
	if d.Region == "ZZ" {
		d.Region = ""
	}
	if t := int(phonenumbers.GetNumberType(num)); t >= 0 && t < len(NumberTypes) {
		d.Type = NumberTypes[t]
	}
	return d
}

// NumberPrefix is the first n digits of e164 after the '+' (the country
// code and the start of the national number), with the '+': the number
// range the velocity alarm groups OTPs by. Never a whole number: n is
// capped below the shortest E.164 number's 8 digits.
func NumberPrefix(e164 string, n int) string {
	n = min(n, 7, len(e164)-1)
	if n < 1 {
		return ""
	}
	return e164[:1+n]
}
