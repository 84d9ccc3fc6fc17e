package opsview

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"smsgw/internal/provider"
)

// fakeSend answers every send with err.
type fakeSend struct{ err error }

func (f *fakeSend) Name() string { return "fake" }
func (f *fakeSend) Send(context.Context, *provider.Request) (provider.Result, error) {
	return provider.Result{}, f.err
}

// pausesOf answers the configured senders' pauses, or fails.
type pausesOf struct {
	left map[string]time.Duration
	err  error
}

func (p pausesOf) SenderPauses(_ context.Context, senders []string) ([]time.Duration, error) {
	if p.err != nil {
		return nil, p.err
	}
	out := make([]time.Duration, len(senders))
	for i, s := range senders {
		out[i] = p.left[s]
	}
	return out, nil
}

// TestSenderLanes: accepted sends count toward their lane's rate (a sender
// without a limit toward "other"), a sender-scoped answer gives the lane's
// reason while its pause holds, the limiter's pause is the configured
// lanes' paused_until (the answers seen stand in when it cannot be read),
// and the JSON has null, not zero, for what is not known.
func TestSenderLanes(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	pauses := &pausesOf{left: map[string]time.Duration{"Mkt1": 30 * time.Second}}
	l := NewSenderLanes(map[string]float64{"Mkt1": 3, "Mkt2": 40}, pauses, func() time.Time { return now })
	fake := &fakeSend{}
	p := l.Observe(fake)
	send := func(from string, n int) {
		for range n {
			_, _ = p.Send(t.Context(), &provider.Request{From: from})
		}
	}
	send("Mkt2", 20)
	send("+15550100", 5)
	now = now.Add(time.Second)
	send("Mkt2", 20)
	fake.err = &provider.Error{Reason: provider.ReasonThrottled, RetryAfter: 30 * time.Second, Scope: provider.ScopeSender}
	send("Mkt1", 1)
	send("+15550100", 1)
	fake.err = &provider.Error{Reason: provider.ReasonThrottled, RetryAfter: time.Second} // the account's: no lane's
	send("Mkt2", 1)
	now = now.Add(time.Second)

	lanes := l.Read(t.Context())
	if len(lanes) != 3 || lanes[0].Sender != "Mkt1" || lanes[1].Sender != "Mkt2" || lanes[2].Sender != SenderLaneOther {
		t.Fatalf("lanes %+v", lanes)
	}
	mkt1, mkt2, other := lanes[0], lanes[1], lanes[2]
	if mkt2.SentPerSecond != 4 || other.SentPerSecond != 0.5 || mkt1.SentPerSecond != 0 {
		t.Errorf("rates Mkt1 %v Mkt2 %v other %v, want 0, 4 (40 in 10 s), 0.5", mkt1.SentPerSecond, mkt2.SentPerSecond, other.SentPerSecond)
	}
	if mkt1.PausedUntil == nil || !mkt1.PausedUntil.Equal(now.Add(30*time.Second)) || mkt1.PauseReason != "throttled" {
		t.Errorf("Mkt1 paused until %v for %q, want the limiter's pause, throttled", mkt1.PausedUntil, mkt1.PauseReason)
	}
	if mkt2.PausedUntil != nil || mkt2.PauseReason != "" {
		t.Errorf("Mkt2 paused until %v for %q: the account's 429 is no lane's", mkt2.PausedUntil, mkt2.PauseReason)
	}
	if other.PausedUntil == nil || other.PauseReason != "throttled" || other.MaxRPS != nil || *mkt1.MaxRPS != 3 {
		t.Errorf("other %+v, Mkt1's limit %v", other, *mkt1.MaxRPS)
	}
	b, err := json.Marshal(lanes[1])
	if err != nil || !strings.Contains(string(b), `"paused_until":null`) || strings.Contains(string(b), "backlog") {
		t.Errorf("Mkt2 as JSON: %s %v", b, err)
	}

	// The limiter unread: the pause this replica drew stands in.
	pauses.err = errors.New("redis down")
	if lanes := l.Read(t.Context()); lanes[0].PausedUntil == nil || lanes[0].PauseReason != "throttled" {
		t.Errorf("without the limiter, Mkt1 %+v", lanes[0])
	}
	// Its pause over, a lane is not paused and has no reason; its rate
	// falls as the seconds leave the window.
	pauses.err, pauses.left = nil, nil
	now = now.Add(time.Minute)
	if lanes := l.Read(t.Context()); lanes[0].PausedUntil != nil || lanes[0].PauseReason != "" || lanes[2].PausedUntil != nil || lanes[1].SentPerSecond != 0 {
		t.Errorf("a minute later %+v", lanes)
	}
}
