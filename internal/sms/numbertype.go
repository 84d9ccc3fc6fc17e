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

// DestinationOf looks up e164, a number ParseE164 returned: what
//
//	num, _ := phonenumbers.Parse(e164, "")
//	phonenumbers.GetRegionCodeForNumber(num), phonenumbers.GetNumberType(num)
//
// answer (an unknown region as ""), on the patterns phone.go compiled once:
// the library takes about 75 µs a number, far more than the rest of a
// request. TestDestinationOfMatchesLibrary holds the two to the same
// answers.
func DestinationOf(e164 string) Destination {
	unknown := Destination{Type: NumberUnknown}
	if !e164Shape(e164) {
		return unknown
	}
	digits := e164[1:]
	plan := planOf(digits)
	if plan == nil {
		return unknown
	}
	nsn := plan.stripNationalPrefix(digits[len(plan.digits):])
	r, name := plan.regionFor(nsn)
	if r == nil {
		return unknown
	}
	return Destination{Region: name, Type: r.typing.of(nsn, r.general)}
}

// regionFor is GetRegionCodeForNumber: the one region of the code, or the
// first whose leading digits match, or (without leading digits) that has
// a type for nsn.
func (c *callingCode) regionFor(nsn string) (*region, string) {
	if len(c.regions) == 1 {
		return c.regions[0], c.names[0]
	}
	for i, cand := range c.regions {
		if cand != nil && (cand.leading != nil && cand.leading.MatchString(nsn) || cand.leading == nil && cand.hasType(nsn)) {
			return cand, c.names[i]
		}
	}
	return nil, ""
}

// regionTypes are a region's number descriptions by type.
type regionTypes struct {
	special         []typedDesc // premium rate to voicemail, in the library's order
	fixed, mobile   *numberDesc
	sameMobileFixed bool
}

type typedDesc struct {
	t NumberType
	d numberDesc
}

func newRegionTypes(m *phonenumbers.PhoneMetadata) regionTypes {
	rt := regionTypes{sameMobileFixed: m.GetSameMobileAndFixedLinePattern()}
	for _, td := range []struct {
		t NumberType
		d *phonenumbers.PhoneNumberDesc
	}{{NumberPremiumRate, m.GetPremiumRate()}, {NumberTollFree, m.GetTollFree()}, {NumberSharedCost, m.GetSharedCost()},
		{NumberVoIP, m.GetVoip()}, {NumberPersonal, m.GetPersonalNumber()}, {NumberPager, m.GetPager()},
		{NumberUAN, m.GetUan()}, {NumberVoicemail, m.GetVoicemail()}} {
		if td.d != nil {
			rt.special = append(rt.special, typedDesc{td.t, newNumberDesc(td.d)})
		}
	}
	if d := m.GetFixedLine(); d != nil {
		nd := newNumberDesc(d)
		rt.fixed = &nd
	}
	if d := m.GetMobile(); d != nil {
		nd := newNumberDesc(d)
		rt.mobile = &nd
	}
	return rt
}

// of is the library's getNumberTypeHelper.
func (rt regionTypes) of(nsn string, general numberDesc) NumberType {
	if !general.matches(nsn) {
		return NumberUnknown
	}
	for _, td := range rt.special {
		if td.d.matches(nsn) {
			return td.t
		}
	}
	mobile := rt.mobile != nil && rt.mobile.matches(nsn)
	if rt.fixed != nil && rt.fixed.matches(nsn) {
		if rt.sameMobileFixed || mobile {
			return NumberFixedLineOrMobile
		}
		return NumberFixedLine
	}
	if !rt.sameMobileFixed && mobile {
		return NumberMobile
	}
	return NumberUnknown
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
