package config

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

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
	// OTPPerNumber caps the OTPs one producer sends to one number in a
	// rolling window (each producer has its own count: one cannot lock a
	// number out for the others); limit 0: off. On by default.
	OTPPerNumber OTPPerNumberConfig `yaml:"otp_per_number"`
	// SuppressOTP applies the suppression list to OTP too (transactional
	// and marketing always obey it).
	SuppressOTP bool `yaml:"suppress_otp"`
	// MaxSuppressions bounds the suppression list for operators' adds; a
	// recipient's or the provider's opt-out goes past it (up to
	// MaxSuppressionsCap), since one refused would be lost.
	MaxSuppressions int `yaml:"max_suppressions"`
	// PrefixAlarm watches the share of OTPs that go to one number range.
	PrefixAlarm PrefixAlarmConfig `yaml:"prefix_alarm"`
	// OptOut is what a recipient's own opt-out does to the suppression
	// list.
	OptOut OptOutConfig `yaml:"opt_out"`
}

// OptOutConfig is the recipients' side of the suppression list
// (docs/design.md, "Protection"). With Enabled, a message a recipient sends
// to the account's number (POST /v1/inbound/{adapter}) whose whole text,
// trimmed, is one of StopWords (in any case) puts the sender's number on
// the list as the recipient's entry, and one of StartWords takes off an
// entry the recipient's opt-out or the provider's report of one made (never
// an operator's); a send the provider refuses because the recipient opted
// out there puts the number on the list as the provider's entry. Without
// it inbound messages are only acknowledged and counted, and a send the
// provider refuses as opted out still ends suppressed, but the list does
// not change.
type OptOutConfig struct {
	Enabled    bool     `yaml:"enabled"`
	StopWords  []string `yaml:"stop_words"`
	StartWords []string `yaml:"start_words"`
}

// The keywords' defaults. Stop: the words Twilio handles as opt-outs on
// long codes by default ("Customize users' opt-in and opt-out experience
// with Advanced Opt-Out", twilio.com/docs/messaging/tutorials/advanced-opt-out),
// the CTIA set with OPTOUT and REVOKE. Start: START and UNSTOP, which
// Twilio, the US toll-free network and AWS all take to opt back in. YES,
// which Twilio's long codes also take, is left out on purpose: it is the
// usual answer to an ordinary question ("reply YES to confirm"), so
// reading it as consent could resubscribe someone who meant something
// else, and staying suppressed is the safe side of a wrong guess (an
// operator who wants it adds it to start_words).
var (
	DefaultStopWords  = []string{"STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT", "OPTOUT", "REVOKE"}
	DefaultStartWords = []string{"START", "UNSTOP"}
)

// MaxKeywordLen bounds one opt-out or opt-in keyword, in bytes.
const MaxKeywordLen = 32

// OTPPerNumberConfig is at most Limit OTPs to one number per Window.
type OTPPerNumberConfig struct {
	Limit  int           `yaml:"limit"`
	Window time.Duration `yaml:"window"`
}

// PrefixAlarmConfig raises the velocity alarm when, within one Window, at
// least MinOTP OTPs were sent and the numbers starting with one prefix of
// Digits digits (country code included) took at least Share of them. With
// Hold above 0, OTPs to a range that raised it are refused for Hold (per
// process); 0, the default: the alarm only alarms.
type PrefixAlarmConfig struct {
	Window time.Duration `yaml:"window"`
	Share  float64       `yaml:"share"`
	MinOTP int           `yaml:"min_otp"`
	Digits int           `yaml:"digits"`
	Hold   time.Duration `yaml:"hold"`
}

// MaxPrefixHold bounds protection.prefix_alarm.hold.
const MaxPrefixHold = 24 * time.Hour

// DefaultOTPPerNumber is protection.otp_per_number.limit by default: OTPs
// to one number per hour from one producer. A person logging in asks for a
// code, maybe a second and a third; five leaves room for that and bounds
// what pumping one number can cost.
const DefaultOTPPerNumber = 5

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
		// On by default: an OTP flood to one number (toll fraud, or a
		// login form hammered for one victim) costs at most this much
		// (docs/design.md, "Protection"). Counted per producer.
		OTPPerNumber:    OTPPerNumberConfig{Limit: DefaultOTPPerNumber, Window: time.Hour},
		MaxSuppressions: 100_000,
		PrefixAlarm:     PrefixAlarmConfig{Window: time.Minute, Share: 0.5, MinOTP: 50, Digits: 5},
		OptOut: OptOutConfig{Enabled: true, StopWords: slices.Clone(DefaultStopWords),
			StartWords: slices.Clone(DefaultStartWords)},
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
	if a.Hold < 0 || a.Hold > MaxPrefixHold {
		p.add("protection.prefix_alarm.hold", "must be between 0 (off) and %s", MaxPrefixHold)
	}
	if a.Digits < 1 || a.Digits > MaxPrefixDigits {
		p.add("protection.prefix_alarm.digits", "must be between 1 and %d (a prefix, never a whole number)", MaxPrefixDigits)
	}
	pc.OptOut.validate(p)
}

// validate checks the keywords: each one word as a recipient would type
// it, in no more than one list.
func (o OptOutConfig) validate(p *problems) {
	if o.Enabled && len(o.StopWords) == 0 {
		p.add("protection.opt_out.stop_words", "must list at least one keyword while protection.opt_out.enabled is true")
	}
	stop := map[string]bool{}
	check := func(key string, words []string, other map[string]bool) {
		for i, w := range words {
			at := fmt.Sprintf("protection.opt_out.%s[%d]", key, i)
			switch {
			case w == "" || len(w) > MaxKeywordLen:
				p.add(at, "must have 1 to %d bytes", MaxKeywordLen)
			case !utf8.ValidString(w) || strings.IndexFunc(w, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) >= 0:
				p.add(at, "%q must be one word: no spaces or control characters (a message is matched whole, trimmed)", w)
			case other[strings.ToUpper(w)]:
				p.add(at, "%q is a stop word too; a keyword cannot both opt out and opt in", w)
			}
		}
	}
	check("stop_words", o.StopWords, nil)
	for _, w := range o.StopWords {
		stop[strings.ToUpper(w)] = true
	}
	check("start_words", o.StartWords, stop)
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
		perNumber = fmt.Sprintf("at most %d OTPs per number and producer per %s", pc.OTPPerNumber.Limit, pc.OTPPerNumber.Window)
	}
	suppressed := "suppression list for transactional and marketing"
	if pc.SuppressOTP {
		suppressed = "suppression list for every class"
	}
	optOut := "recipients' opt-outs not applied"
	if pc.OptOut.Enabled {
		optOut = "opt-out keywords " + strings.Join(pc.OptOut.StopWords, ", ")
		if len(pc.OptOut.StartWords) > 0 {
			optOut += " (opt-in " + strings.Join(pc.OptOut.StartWords, ", ") + ")"
		}
	}
	held := "alarmed ranges not held"
	if pc.PrefixAlarm.Hold > 0 {
		held = fmt.Sprintf("a range that raises the OTP velocity alarm held for %s", pc.PrefixAlarm.Hold)
	}
	return strings.Join([]string{countries, blocked, perNumber, suppressed, optOut, held}, "; ")
}
