package limiter

import (
	"testing"
	"time"

	"smsgw/internal/redistest"
)

// TestSenderPausesReadEveryReplicasPause: a sender's pause set through one
// replica's shared limiter is read by another's (a configured sender and
// one without a limit alike), an unpaused sender reads 0, and a local
// limiter reads its own pauses.
func TestSenderPausesReadEveryReplicasPause(t *testing.T) {
	t.Parallel()
	a, _, account := newRedisLimiter(t, senderCfg)
	b, err := NewRedis(redistest.Client(t), account, senderCfg)
	if err != nil {
		t.Fatal(err)
	}
	setter, err := NewShared(SharedConfig{Redis: a, MaxSenders: 2})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := NewShared(SharedConfig{Redis: b, MaxSenders: 2})
	if err != nil {
		t.Fatal(err)
	}
	local, err := NewLocal(senderCfg)
	if err != nil {
		t.Fatal(err)
	}
	senders := []string{"Mkt1", "Mkt2", "+15550100"}
	check := func(name string, set Limiter, read func([]string) ([]time.Duration, error)) {
		t.Helper()
		for _, s := range []string{"Mkt1", "+15550100"} {
			if _, err := set.PauseSender(bg, s, 3*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		left, err := read(senders)
		if err != nil || len(left) != 3 {
			t.Fatalf("%s: %v %v", name, left, err)
		}
		if left[0] < 2*time.Second || left[0] > 3*time.Second || left[2] < 2*time.Second || left[1] != 0 {
			t.Errorf("%s: pauses left %v, want about 3 s, 0, about 3 s", name, left)
		}
	}
	check("shared", setter, func(s []string) ([]time.Duration, error) { return reader.SenderPauses(bg, s) })
	check("local", local, func(s []string) ([]time.Duration, error) { return local.SenderPauses(bg, s) })
}
