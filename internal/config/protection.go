package config

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"smsgw/internal/sms"
)

// ProtectionConfig is abuse resistance at accept time (docs/design.md,
// "Protection"): where messages may go, to which kinds of line, how many
// OTPs one number may receive, the suppression list, and the alarm on a
// number range that takes over OTP traffic.
type ProtectionConfig struct {
	// Countries are the destination regions allowed (ISO 3166-1 alpha-2,
	// upper case); empty: every region. Numbers of no region (satellite,
	// international networks) are refused when the list is set.
	Countries []string `yaml:"countries"`
	// BlockNumberTypes are the number types refused (sms.NumberTypes).
	BlockNumberTypes []string `yaml:"block_number_types"`
	// OTPPerNumber caps OTPs per number in a rolling window; limit 0: off.
	OTPPerNumber OTPPerNumberConfig `yaml:"otp_per_number"`
	// SuppressOTP applies the suppression list to OTP too (transactional
	// and marketing always obey it).
	SuppressOTP bool `yaml:"suppress_otp"`
	// MaxSuppressions bounds the suppression list.
	MaxSuppressions int `yaml:"max_suppressions"`
	// PrefixAlarm watches the share of OTPs that go to one number range.
	PrefixAlarm PrefixAlarmConfig `yaml:"prefix_alarm"`
}

// OTPPerNumberConfig is at most Limit OTPs to one number per Window.
type OTPPerNumberConfig struct {
	Limit  int           `yaml:"limit"`
	Window time.Duration `yaml:"window"`
}

// PrefixAlarmConfig raises the velocity alarm when, within one Window, at
// least MinOTP OTPs were sent and the numbers starting with one prefix of
// Digits digits (country code included) took at least Share of them.
type PrefixAlarmConfig struct {
	Window time.Duration `yaml:"window"`
	Share  float64       `yaml:"share"`
	MinOTP int           `yaml:"min_otp"`
	Digits int           `yaml:"digits"`
}

// Bounds of the protection keys.
const (
	MaxOTPPerNumber     = 1000
	MaxOTPPerNumberSpan = 31 * 24 * time.Hour
	MaxSuppressionsCap  = 1_000_000
	MaxPrefixDigits     = 7 // below the 8 digits of the shortest E.164 number
)

func defaultProtection() ProtectionConfig {
	return ProtectionConfig{
		BlockNumberTypes: []string{string(sms.NumberPremiumRate), string(sms.NumberSharedCost)},
		OTPPerNumber:     OTPPerNumberConfig{Window: time.Hour},
		MaxSuppressions:  100_000,
		PrefixAlarm:      PrefixAlarmConfig{Window: time.Minute, Share: 0.5, MinOTP: 50, Digits: 5},
	}
}

func (c *Config) validateProtection(p *problems) {
	pc := c.Protection
	for i, r := range pc.Countries {
		if !sms.ValidRegion(r) {
			p.add(fmt.Sprintf("protection.countries[%d]", i), "%q is not an ISO 3166-1 alpha-2 region code in upper case (JP, GB, US)", r)
		}
	}
	names := make([]string, len(sms.NumberTypes))
	for i, t := range sms.NumberTypes {
		names[i] = string(t)
	}
	for i, t := range pc.BlockNumberTypes {
		if !slices.Contains(names, t) {
			p.add(fmt.Sprintf("protection.block_number_types[%d]", i), "%q is not one of %s", t, strings.Join(names, ", "))
		}
	}
	o := pc.OTPPerNumber
	if o.Limit < 0 || o.Limit > MaxOTPPerNumber {
		p.add("protection.otp_per_number.limit", "must be 0 (off) to %d", MaxOTPPerNumber)
	}
	if o.Limit > 0 && (o.Window < time.Second || o.Window > MaxOTPPerNumberSpan) {
		p.add("protection.otp_per_number.window", "must be between 1s and %s", MaxOTPPerNumberSpan)
	}
	if pc.MaxSuppressions < 1 || pc.MaxSuppressions > MaxSuppressionsCap {
		p.add("protection.max_suppressions", "must be between 1 and %d", MaxSuppressionsCap)
	}
	a := pc.PrefixAlarm
	if a.Window < time.Second || a.Window > 24*time.Hour {
		p.add("protection.prefix_alarm.window", "must be between 1s and 24h")
	}
	if math.IsNaN(a.Share) || a.Share <= 0 || a.Share > 1 {
		p.add("protection.prefix_alarm.share", "must be above 0 and at most 1")
	}
	if a.MinOTP < 1 {
		p.add("protection.prefix_alarm.min_otp", "must be at least 1")
	}
	if a.Digits < 1 || a.Digits > MaxPrefixDigits {
		p.add("protection.prefix_alarm.digits", "must be between 1 and %d (a prefix, never a whole number)", MaxPrefixDigits)
	}
}

// Summary is the protection in one line, for `smsgw check-config`.
func (pc ProtectionConfig) Summary() string {
	countries := "all regions"
	if len(pc.Countries) > 0 {
		countries = "regions " + strings.Join(pc.Countries, ", ")
	}
	blocked := "no number type blocked"
	if len(pc.BlockNumberTypes) > 0 {
		blocked = "blocked " + strings.Join(pc.BlockNumberTypes, ", ")
	}
	perNumber := "OTPs per number unlimited"
	if pc.OTPPerNumber.Limit > 0 {
		perNumber = fmt.Sprintf("at most %d OTPs per number per %s", pc.OTPPerNumber.Limit, pc.OTPPerNumber.Window)
	}
	suppressed := "suppression list for transactional and marketing"
	if pc.SuppressOTP {
		suppressed = "suppression list for every class"
	}
	return strings.Join([]string{countries, blocked, perNumber, suppressed}, "; ")
}
