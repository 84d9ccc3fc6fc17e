package dispatch

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Each Mark adds the time since the previous mark to its step; a step
// marked twice accumulates; a nil Steps ignores marks.
func TestStepsMark(t *testing.T) {
	s := NewSteps(time.Now().Add(-3 * time.Millisecond))
	s.Mark(StepDecode) // ≥ 3 ms since the start
	s.Mark(StepReserve)
	time.Sleep(2 * time.Millisecond)
	s.Mark(StepDecode) // + ≥ 2 ms
	if d := s.Duration(StepDecode); d < 5*time.Millisecond {
		t.Errorf("decode %s, want >= 5ms (two marks)", d)
	}
	if d := s.Duration(StepReserve); d >= 2*time.Millisecond {
		t.Errorf("reserve %s, want the short gap only", d)
	}
	if s.Duration(StepProvider) != 0 || s.Duration(NumSteps) != 0 {
		t.Errorf("unmarked steps have time: %s", s.ServerTiming())
	}
	st := s.ServerTiming()
	if !strings.HasPrefix(st, "decode;dur=") || strings.Count(st, ";dur=") != int(NumSteps) || !strings.HasSuffix(st, "provider;dur=0") {
		t.Errorf("Server-Timing %q", st)
	}
	var none *Steps
	none.Mark(StepDecode)
	if none.Duration(StepDecode) != 0 || none.ServerTiming() != "" {
		t.Error("nil Steps recorded something")
	}
	if stepsFrom(WithSteps(context.Background(), s)) != s || stepsFrom(context.Background()) != nil {
		t.Error("context does not carry the steps")
	}
}
