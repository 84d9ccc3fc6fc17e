package logsample

import (
	"testing"
	"time"
)

func TestSampler(t *testing.T) {
	var s Sampler
	t0 := time.Unix(1_700_000_000, 0)
	steps := []struct {
		at     time.Duration
		n      int
		logged bool
	}{
		{0, 1, true},                // the first is logged at once
		{time.Second, 0, false},     // within the interval: counted
		{2 * time.Second, 0, false}, //
		{10 * time.Second, 3, true}, // the interval passed: stands for 3
		{11 * time.Second, 0, false},
	}
	for _, st := range steps {
		if n, ok := s.Add(t0.Add(st.at), 10*time.Second); n != st.n || ok != st.logged {
			t.Fatalf("Add at %s = %d, %v; want %d, %v", st.at, n, ok, st.n, st.logged)
		}
	}
	s.Reset()
	if n, ok := s.Add(t0.Add(12*time.Second), 10*time.Second); n != 1 || !ok {
		t.Fatalf("Add after Reset = %d, %v; want 1, true", n, ok)
	}
}
