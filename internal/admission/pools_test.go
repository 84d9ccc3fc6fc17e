package admission

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/config"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

func testPools(t *testing.T) *Pools {
	t.Helper()
	cfg := config.Default()
	cfg.Limits.Senders = map[string]config.SenderLimits{"Mkt1": {MaxRPS: 1}, "Mkt2": {MaxRPS: 4}}
	cfg.Producers = []config.Producer{{Name: "shop", Classes: []string{"marketing", "transactional"}, Senders: []string{"Shop", "Mkt1", "Mkt2"},
		SenderPools: map[string][]string{"marketing": {"Mkt1", "Mkt2"}}}}
	p, err := NewPools(cfg, prometheus.NewRegistry(), nil)
	if err != nil || p == nil {
		t.Fatalf("NewPools: %v %v", p, err)
	}
	p.Sticky = state.NewLocalStickySenders(0)
	p.NumberKey = func(context.Context) ([]byte, error) { return make([]byte, 32), nil }
	return p
}

func marketing(to string) *sms.Message {
	return &sms.Message{Class: sms.ClassMarketing, To: to, Segments: 1}
}

// The earliest free slot spreads new recipients in proportion to the
// senders' rates, ties in pool order; a class without a pool takes the
// first sender; a message that names its sender keeps it.
func TestPoolsEarliestSlot(t *testing.T) {
	p := testPools(t)
	now := time.Unix(1e9, 0)
	ms := make([]*sms.Message, 8)
	for i := range ms {
		ms[i] = marketing("+8190100000" + string(rune('0'+i)))
	}
	named := &sms.Message{Class: sms.ClassMarketing, To: "+819010000099", From: "Mkt1"}
	txn := &sms.Message{Class: sms.ClassTransactional, To: "+819010000098"}
	p.assignSenders(context.Background(), "shop", append(ms, named, txn), false, now)
	var got []string
	for _, m := range ms {
		got = append(got, m.From)
	}
	// Mkt1 at 1/s, Mkt2 at 4/s: ties (both free, then both at +1 s) go to Mkt1.
	want := []string{"Mkt1", "Mkt2", "Mkt2", "Mkt2", "Mkt2", "Mkt1", "Mkt2", "Mkt2"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("assigned %q, want %q", got, want)
		}
	}
	if named.From != "Mkt1" || txn.From != "Shop" {
		t.Errorf("named %q (want Mkt1), transactional %q (want Shop)", named.From, txn.From)
	}
}

// A recipient keeps its sender; a paused sender is passed over while the
// other is free; a failing sticky store costs nothing but stickiness.
func TestPoolsStickyPausedAndStoreDown(t *testing.T) {
	p := testPools(t)
	ctx := context.Background()
	now := time.Unix(1e9, 0)
	first := marketing("+819012345678")
	p.assignSenders(ctx, "shop", []*sms.Message{first}, false, now)
	// Mkt1 is now behind Mkt2; the recipient stays with Mkt1 anyway.
	again := marketing("+819012345678")
	p.assignSenders(ctx, "shop", []*sms.Message{again}, false, now)
	if first.From != "Mkt1" || again.From != "Mkt1" {
		t.Fatalf("sent from %q then %q, want Mkt1 both times", first.From, again.From)
	}
	p.Paused = func(s string) time.Duration {
		if s == "Mkt1" {
			return time.Minute
		}
		return 0
	}
	later := now.Add(time.Hour) // both idle: Mkt1 would win the tie
	m := marketing("+819011111111")
	p.assignSenders(ctx, "shop", []*sms.Message{m}, false, later)
	if m.From != "Mkt2" {
		t.Errorf("with Mkt1 paused: %q, want Mkt2", m.From)
	}
	p.Paused = nil
	p.NumberKey = func(context.Context) ([]byte, error) { return nil, errors.New("down") }
	m = marketing("+819011111111") // held Mkt2
	p.assignSenders(ctx, "shop", []*sms.Message{m}, false, later.Add(time.Hour))
	if m.From != "Mkt1" {
		t.Errorf("store down: %q, want the earliest slot's Mkt1", m.From)
	}
}
