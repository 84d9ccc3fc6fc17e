package config

import (
	"strings"
	"testing"
	"time"

	"smsgw/internal/sms"
)

// Every bad pool is refused with its key named; a good one loads.
func TestSenderPoolsValidation(t *testing.T) {
	load := func(producer string) error {
		_, err := Load([]byte(`
provider: {url: "http://127.0.0.1:9100/send"}
producers: [{name: app, key: "app-key-0123456789ab", rate: 1, burst: 1, `+producer+`}]
`), nil)
		return err
	}
	if err := load(`classes: [otp, marketing], senders: [Auth1, Auth2, Mkt1, "+4402079460000"],
  sender_pools: {otp: [Auth1, Auth2], marketing: [Mkt1, "+442079460000"]}, sender_pool_sticky_for: 2h`); err != nil {
		t.Fatalf("a good pool refused: %v", err)
	}
	if err := load(`classes: [marketing], sender_pools: {marketing: [Any1, Any2]}`); err != nil {
		t.Fatalf("a pool of a producer without senders refused: %v", err)
	}
	for _, c := range []struct{ producer, key, says string }{
		{`classes: [otp], sender_pools: {sms: [A]}`, "sender_pools.sms", "unknown class"},
		{`classes: [otp], sender_pools: {otp: []}`, "sender_pools.otp", "at least one sender"},
		{`classes: [otp], senders: [A, B], sender_pools: {otp: [A, C]}`, "sender_pools.otp[1]", "not one of the producer's senders"},
		{`classes: [otp], sender_pools: {otp: [A, A]}`, "sender_pools.otp[1]", "duplicate"},
		{`classes: [otp], sender_pools: {otp: ["+442079460000", "+4402079460000"]}`, "sender_pools.otp[1]", "duplicate"},
		{`classes: [otp], sender_pools: {otp: [""]}`, "sender_pools.otp[0]", "must not be empty"},
		{`classes: [otp], sender_pools: {marketing: [A]}`, "sender_pools.marketing", "may not send class marketing"},
		{`classes: [otp], sender_pools: {otp: [A]}, sender_pool_sticky_for: 1s`, "sender_pool_sticky_for", "must be 0"},
	} {
		err := load(c.producer)
		if err == nil || !strings.Contains(err.Error(), "producers[0] (app)."+c.key+": ") || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want %s: ...%s", c.producer, err, c.key, c.says)
		}
	}
}

func TestSenderPoolDefaults(t *testing.T) {
	p := Producer{SenderPools: map[string][]string{"marketing": {"+4402079460000", "Mkt2"}}}
	if got := p.StickyFor(); got != 24*time.Hour {
		t.Errorf("sticky_for default %s", got)
	}
	if got := p.SenderPool(sms.ClassMarketing); len(got) != 2 || got[0] != "+442079460000" || got[1] != "Mkt2" {
		t.Errorf("marketing pool %q, want normalized", got)
	}
	if got := p.SenderPool(sms.ClassOTP); got != nil {
		t.Errorf("otp pool %q, want none", got)
	}
}
