package senderlanes

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"smsgw/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestScenarioAtATinySize: the scenario's wiring and report at a few
// messages: paced for the account only, the provider refuses Mkt1's
// fourth message within a second (a sender's 429, not the account's);
// paced per sender, no sender draws one; either way every OTP is answered
// and every accepted message reaches the provider once. (How fast, and
// whether every OTP is answered 200, is the full run's figure.)
func TestScenarioAtATinySize(t *testing.T) {
	rep, err := Run(t.Context(), Config{RedisAddr: redistest.Addr(t), Mkt1: 4, Mkt2: 4, OTPRate: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || rep.Results[0].Mode != AccountOnly || rep.Results[1].Mode != SenderAware {
		t.Fatalf("results %+v", rep.Results)
	}
	for _, r := range rep.Results {
		if !r.Finished || r.Lost != 0 || r.Duplicated != 0 || r.Account429 != 0 || r.OTPOK == 0 ||
			r.OTPOK+r.OTPRefused != r.OTPOffered || r.Messages != 8+r.OTPOK {
			t.Errorf("%s: %+v", r.Mode, r)
		}
	}
	if got := rep.Results[0].Sender429["Mkt1"]; got == 0 {
		t.Errorf("account-only: Mkt1 drew no 429: %+v", rep.Results[0])
	}
	if aware := rep.Results[1]; aware.Sender429s != 0 || aware.Configured == "" {
		t.Errorf("sender-aware: %+v", aware)
	}
	var b bytes.Buffer
	if err := WriteTable(&b, rep); err != nil || !strings.Contains(b.String(), "sender-aware") {
		t.Errorf("table: %v\n%s", err, b.String())
	}
	t.Log("\n" + b.String())
}
