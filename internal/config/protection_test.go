package config

import (
	"strings"
	"testing"
	"time"
)

// TestProtectionSummary: check-config's line says what is refused.
func TestProtectionSummary(t *testing.T) {
	t.Parallel()
	if got, want := Default().Protection.Summary(),
		"all regions; blocked premium_rate, shared_cost; at most 5 OTPs per number and producer per 1h0m0s; suppression list for transactional and marketing; "+
			"opt-out keywords STOP, STOPALL, UNSUBSCRIBE, CANCEL, END, QUIT, OPTOUT, REVOKE (opt-in START, UNSTOP); alarmed ranges not held"; got != want {
		t.Errorf("default: %q, want %q", got, want)
	}
	p := Default().Protection
	p.Countries, p.BlockNumberTypes, p.SuppressOTP = []string{"JP", "US"}, nil, true
	p.OTPPerNumber.Limit = 0
	p.OptOut.Enabled = false
	p.PrefixAlarm.Hold = time.Hour
	if got, want := p.Summary(),
		"regions JP, US; no number type blocked; OTPs per number unlimited; suppression list for every class; "+
			"recipients' opt-outs not applied; a range that raises the OTP velocity alarm held for 1h0m0s"; got != want {
		t.Errorf("set: %q, want %q", got, want)
	}
}

// TestOptOutKeywords: the defaults are the standard lists, on; every bad
// word is reported with its key and index, all at once; an environment
// variable sets a list.
func TestOptOutKeywords(t *testing.T) {
	t.Parallel()
	o := Default().Protection.OptOut
	if !o.Enabled || len(o.StopWords) != 8 || o.StopWords[0] != "STOP" || len(o.StartWords) != 2 || o.StartWords[1] != "UNSTOP" {
		t.Fatalf("defaults %+v", o)
	}
	cfg, err := Load([]byte(`
provider: {url: "http://127.0.0.1:9100/send"}
producers: [{name: app, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1}]
protection: {opt_out: {stop_words: ["", "ARRÊT", "STOP\t", "`+strings.Repeat("X", MaxKeywordLen+1)+`"], start_words: [arrêt, START]}}
`), nil)
	if err == nil {
		t.Fatalf("loaded %+v", cfg.Protection.OptOut)
	}
	for _, key := range []string{"protection.opt_out.stop_words[0]", "protection.opt_out.stop_words[2]",
		"protection.opt_out.stop_words[3]", "protection.opt_out.start_words[0]"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not name %s:\n%v", key, err)
		}
	}
	if strings.Contains(err.Error(), "stop_words[1]") || strings.Contains(err.Error(), "start_words[1]") {
		t.Errorf("a good word reported:\n%v", err)
	}
	cfg, err = Load([]byte(`
provider: {url: "http://127.0.0.1:9100/send"}
producers: [{name: app, key: "app-key-0123456789ab", classes: [otp], rate: 1, burst: 1}]
`), []string{"SMSGW_PROTECTION_OPT_OUT_START_WORDS=[START, YES]", "SMSGW_PROTECTION_OPT_OUT_ENABLED=false"})
	if err != nil {
		t.Fatal(err)
	}
	if o := cfg.Protection.OptOut; o.Enabled || len(o.StartWords) != 2 || o.StartWords[1] != "YES" {
		t.Errorf("from the environment: %+v", o)
	}
}
