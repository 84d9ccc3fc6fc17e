package history

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"smsgw/internal/sms"
)

// The conformance suite of the Store seam: Local and Redis run it alike.
// Times are absolute and far from now, so the cases pin down step
// arithmetic without waiting for the clock (Redis expiries are relative,
// so they do not interfere).

// suiteConfig: 12 steps of 5 s.
var suiteConfig = Config{Step: 5 * time.Second, Window: time.Minute}

// base starts a step.
var base = time.Date(2031, 3, 14, 15, 9, 25, 0, time.UTC)

type newStore func(t *testing.T, cfg Config) Store

func runConformance(t *testing.T, newStore newStore) {
	cases := []struct {
		name string
		run  func(t *testing.T, st Store)
	}{
		{"EmptyWindow", testEmptyWindow},
		{"AddsSumDepthIsLastWritten", testAddsSum},
		{"CurrentStepIsNotRead", testCurrentStep},
		{"StepsStayApart", testStepsApart},
		{"WindowEnds", testWindowEnds},
		{"OldStepsDropped", testOldSteps},
		{"ConcurrentAdds", testConcurrentAdds},
		{"Clock", testClock},
		{"CancelledContext", testCancelled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newStore(t, suiteConfig))
		})
	}
}

func read(t *testing.T, st Store, now time.Time) Series {
	t.Helper()
	s, err := st.Read(t.Context(), now)
	if err != nil {
		t.Fatalf("Read(%s): %v", now, err)
	}
	if len(s.Samples) != 12 || s.Step != 5*time.Second {
		t.Fatalf("Read(%s): %d samples of %s, want 12 of 5s", now, len(s.Samples), s.Step)
	}
	return s
}

func add(t *testing.T, st Store, at time.Time, s Sample) {
	t.Helper()
	if err := st.Add(t.Context(), at, s); err != nil {
		t.Fatalf("Add(%s): %v", at, err)
	}
}

func sent(otp, tx, mkt int64) PerClass {
	var p PerClass
	p[sms.ClassOTP], p[sms.ClassTransactional], p[sms.ClassMarketing] = otp, tx, mkt
	return p
}

func isZero(s Sample) bool { return s == Sample{} }

func testEmptyWindow(t *testing.T, st Store) {
	s := read(t, st, base.Add(2*time.Second))
	if !s.Start.Equal(base.Add(-time.Minute)) || !s.End().Equal(base) {
		t.Fatalf("window %s..%s, want %s..%s", s.Start, s.End(), base.Add(-time.Minute), base)
	}
	for i, smp := range s.Samples {
		if !isZero(smp) {
			t.Fatalf("sample %d of an empty store = %+v", i, smp)
		}
	}
}

func testAddsSum(t *testing.T, st Store) {
	// Two replicas add to the same step; the depth is the last one written,
	// and an Add without a depth keeps it.
	add(t, st, base.Add(time.Second), Sample{Sent: sent(2, 0, 1), Direct: 1, Accepted: sent(0, 4, 3),
		Throttled: 1, Queued: sent(1, 2, 3), HasQueued: true})
	add(t, st, base.Add(4*time.Second), Sample{Sent: sent(1, 5, 0), Direct: 1, Queued: sent(4, 5, 6), HasQueued: true})
	add(t, st, base.Add(4500*time.Millisecond), Sample{Throttled: 2})
	got := read(t, st, base.Add(5*time.Second)).Samples[11]
	want := Sample{Sent: sent(3, 5, 1), Direct: 2, Accepted: sent(0, 4, 3), Throttled: 3, Queued: sent(4, 5, 6), HasQueued: true}
	if got != want {
		t.Fatalf("step = %+v\nwant   %+v", got, want)
	}
	// A depth of zero is a depth, not a missing one.
	add(t, st, base.Add(6*time.Second), Sample{HasQueued: true})
	if got := read(t, st, base.Add(10*time.Second)).Samples[11]; got != (Sample{HasQueued: true}) {
		t.Fatalf("step with an empty queue = %+v", got)
	}
}

func testCurrentStep(t *testing.T, st Store) {
	add(t, st, base.Add(time.Second), Sample{Sent: sent(1, 0, 0)})
	for i, smp := range read(t, st, base.Add(4999*time.Millisecond)).Samples {
		if !isZero(smp) {
			t.Fatalf("the step in progress is read (sample %d = %+v)", i, smp)
		}
	}
	s := read(t, st, base.Add(5*time.Second))
	if s.Samples[11].Sent != sent(1, 0, 0) {
		t.Fatalf("the step just ended = %+v", s.Samples[11])
	}
}

func testStepsApart(t *testing.T, st Store) {
	for i := range 3 {
		add(t, st, base.Add(time.Duration(i)*5*time.Second), Sample{Accepted: sent(0, 0, int64(10+i))})
	}
	s := read(t, st, base.Add(15*time.Second))
	for i := range 3 {
		if got := s.Samples[9+i].Accepted[sms.ClassMarketing]; got != int64(10+i) {
			t.Fatalf("sample %d accepted marketing %d, want %d", 9+i, got, 10+i)
		}
	}
	if !isZero(s.Samples[8]) {
		t.Fatalf("the step before = %+v", s.Samples[8])
	}
}

func testWindowEnds(t *testing.T, st Store) {
	add(t, st, base, Sample{Throttled: 7})
	if s := read(t, st, base.Add(time.Minute)); s.Samples[0].Throttled != 7 || !s.Start.Equal(base) {
		t.Fatalf("a step as old as the window: start %s, first %+v", s.Start, s.Samples[0])
	}
	for i, smp := range read(t, st, base.Add(time.Minute+5*time.Second)).Samples {
		if !isZero(smp) {
			t.Fatalf("a step out of the window is read (sample %d = %+v)", i, smp)
		}
	}
}

func testOldSteps(t *testing.T, st Store) {
	add(t, st, base, Sample{Throttled: 1})
	add(t, st, base.Add(time.Minute), Sample{Throttled: 2}) // Local: the same ring slot
	add(t, st, base.Add(time.Second), Sample{Throttled: 4}) // out of the window now
	s := read(t, st, base.Add(time.Minute+5*time.Second))
	var total int64
	for _, smp := range s.Samples {
		total += smp.Throttled
	}
	if s.Samples[11].Throttled != 2 || total != 2 {
		t.Fatalf("last step %+v, total 429s %d: want 2 and 2", s.Samples[11], total)
	}
}

func testConcurrentAdds(t *testing.T, st Store) {
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				if err := st.Add(t.Context(), base.Add(2*time.Second), Sample{Sent: sent(1, 0, 0), Throttled: 1}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := read(t, st, base.Add(5*time.Second)).Samples[11]; got.Sent[sms.ClassOTP] != 200 || got.Throttled != 200 {
		t.Fatalf("200 concurrent adds summed to %+v", got)
	}
}

func testClock(t *testing.T, st Store) {
	now, err := st.Now(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(now); d > time.Minute || d < -time.Minute {
		t.Fatalf("store clock %s is %s off this machine's", now, d)
	}
}

func testCancelled(t *testing.T, st Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := st.Now(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Now: %v, want context.Canceled", err)
	}
	if err := st.Add(ctx, base, Sample{Sent: sent(1, 0, 0)}); !errors.Is(err, context.Canceled) {
		t.Errorf("Add: %v, want context.Canceled", err)
	}
	if err := st.Add(ctx, base, Sample{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Add of nothing: %v, want context.Canceled", err)
	}
	if _, err := st.Read(ctx, base); !errors.Is(err, context.Canceled) {
		t.Errorf("Read: %v, want context.Canceled", err)
	}
}
