package statetest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/state"
)

var cases = []testCase{
	{"IdemFirstAnswerReplayed", testIdemReplay},
	{"IdemFinishWithoutAnswer", testIdemFinishNil},
	{"IdemLockExpiresStaleFinish", testIdemStaleFinish},
	{"IdemAnswerExpires", testIdemAnswerExpires},
	{"IdemKeysIndependent", testIdemIndependent},
	{"IdemConcurrentAcquire", testIdemConcurrent},
	{"IdemInvalid", testIdemInvalid},
	{"IdemAnswerTooLargeNotStored", testIdemTooLarge},
	{"PauseUntilCleared", testPauseUntilCleared},
	{"PauseTimed", testPauseTimed},
	{"PauseLaterSetReplaces", testPauseReplaces},
	{"PauseInvalid", testPauseInvalid},
	{"CountersAddRead", testCountersAddRead},
	{"CountersUnknownField", testCountersUnknown},
	{"CountersConcurrent", testCountersConcurrent},
	{"ThrottlesRecordCount", testThrottlesRecordCount},
	{"ThrottlesWindow", testThrottlesWindow},
	{"ThrottlesConcurrent", testThrottlesConcurrent},
	{"NumberLimitsTake", testNumberTake},
	{"NumberLimitsWindow", testNumberWindow},
	{"NumberLimitsReturn", testNumberReturn},
	{"NumberLimitsConcurrent", testNumberConcurrent},
	{"NumberLimitsInvalid", testNumberInvalid},
	{"SuppressionsAddRemove", testSuppressAddRemove},
	{"SuppressionsPaging", testSuppressPaging},
	{"SuppressionsBound", testSuppressBound},
	{"SuppressionsKey", testSuppressKey},
	{"SuppressionsInvalid", testSuppressInvalid},
	{"SuppressionsSource", testSuppressSource},
	{"SuppressionsLift", testSuppressLift},
	{"SuppressionsOperatorTakesOver", testSuppressOperatorTakesOver},
	{"SuppressionsApplied", testApplied},
	{"SuppressionsLiftOlder", testLiftOlder},
	{"StickyKeepsAndSets", testStickyKeepsAndSets},
	{"StickyExpires", testStickyExpires},
	{"StickyConcurrent", testStickyConcurrent},
	{"StickyInvalid", testStickyInvalid},
	{"ContextCancelled", testContextCancelled},
}

const (
	day    = 24 * time.Hour
	minute = time.Minute
)

func answer(body string) *state.Answer {
	return &state.Answer{Hash: "h-" + body, Status: 202, Body: []byte(`{"id":"` + body + `"}`), Location: "/v1/messages/" + body}
}

func sameAnswer(a, b *state.Answer) bool {
	return a != nil && b != nil && a.Hash == b.Hash && a.Status == b.Status && bytes.Equal(a.Body, b.Body) && a.Location == b.Location
}

// mustLock takes the lock of key on s.
func mustLock(t *testing.T, s state.Idempotency, key string, ttl time.Duration) string {
	t.Helper()
	a, token, err := s.Acquire(t.Context(), key, ttl)
	if err != nil || a != nil || token == "" {
		t.Fatalf("Acquire %s = %v, %q, %v; want the lock", key, a, token, err)
	}
	return token
}

// wantInFlight checks that key is locked by another request.
func wantInFlight(t *testing.T, s state.Idempotency, key string) {
	t.Helper()
	a, token, err := s.Acquire(t.Context(), key, minute)
	if err != nil || a != nil || token != "" {
		t.Fatalf("Acquire %s = %v, %q, %v; want in flight (no answer, no token)", key, a, token, err)
	}
}

func wantAnswer(t *testing.T, s state.Idempotency, key string, want *state.Answer) {
	t.Helper()
	a, token, err := s.Acquire(t.Context(), key, minute)
	if err != nil || token != "" || !sameAnswer(a, want) {
		t.Fatalf("Acquire %s = %+v, %q, %v; want the answer %+v", key, a, token, err, want)
	}
}

func testIdemReplay(t *testing.T, h Harness) {
	s := h.Idempotency(t, day, 2)
	token := mustLock(t, s[0], "k1", minute)
	wantInFlight(t, s[1], "k1")
	wantInFlight(t, s[0], "k1")
	want := answer("first")
	if err := s[0].Finish(t.Context(), "k1", token, want); err != nil {
		t.Fatal(err)
	}
	wantAnswer(t, s[1], "k1", want)
	wantAnswer(t, s[0], "k1", want)
}

func testIdemFinishNil(t *testing.T, h Harness) {
	s := h.Idempotency(t, day, 2)
	first := mustLock(t, s[0], "k", minute)
	if err := s[0].Finish(t.Context(), "k", first, nil); err != nil {
		t.Fatal(err)
	}
	if again := mustLock(t, s[1], "k", minute); again == first {
		t.Fatal("the second lock has the first lock's token")
	}
}

// testIdemTooLarge: an answer over state.MaxAnswerBytes is not stored
// (the lock is released all the same); one at the bound is, with its
// Deflated flag.
func testIdemTooLarge(t *testing.T, h Harness) {
	s := h.Idempotency(t, day, 2)
	big := answer("big")
	big.Body = bytes.Repeat([]byte("x"), state.MaxAnswerBytes)
	token := mustLock(t, s[0], "big", minute)
	if err := s[0].Finish(t.Context(), "big", token, big); err != nil {
		t.Fatal(err)
	}
	mustLock(t, s[1], "big", minute)
	fits := answer("fits")
	fits.Deflated = true
	fits.Body = bytes.Repeat([]byte("y"), state.MaxAnswerBytes-fits.Size()+len(fits.Body))
	token = mustLock(t, s[0], "fits", minute)
	if err := s[0].Finish(t.Context(), "fits", token, fits); err != nil {
		t.Fatal(err)
	}
	wantAnswer(t, s[1], "fits", fits)
	if a, _, _ := s[1].Acquire(t.Context(), "fits", minute); a == nil || !a.Deflated {
		t.Errorf("the Deflated flag was not kept: %+v", a)
	}
}

func testIdemStaleFinish(t *testing.T, h Harness) {
	s := h.Idempotency(t, day, 3)
	stale := mustLock(t, s[0], "k", 50*time.Millisecond)
	var holder string
	eventually(t, "the short lock to expire", func() bool {
		_, holder, _ = s[1].Acquire(t.Context(), "k", minute)
		return holder != ""
	})
	if holder == stale {
		t.Fatal("the new lock has the expired lock's token")
	}
	if err := s[0].Finish(t.Context(), "k", stale, nil); err != nil {
		t.Fatal(err)
	}
	wantInFlight(t, s[2], "k") // the stale Finish left the new lock alone
	late := answer("late")
	if err := s[0].Finish(t.Context(), "k", stale, late); err != nil {
		t.Fatal(err)
	}
	wantAnswer(t, s[2], "k", late)
}

func testIdemAnswerExpires(t *testing.T, h Harness) {
	s := h.Idempotency(t, 200*time.Millisecond, 2)
	token := mustLock(t, s[0], "k", minute)
	if err := s[0].Finish(t.Context(), "k", token, answer("short")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the answer to leave the window", func() bool {
		a, tok, err := s[1].Acquire(t.Context(), "k", minute)
		return err == nil && a == nil && tok != ""
	})
}

func testIdemIndependent(t *testing.T, h Harness) {
	s := h.Idempotency(t, day, 1)[0]
	t1 := mustLock(t, s, "a", minute)
	t2 := mustLock(t, s, "b", minute)
	if err := s.Finish(t.Context(), "a", t1, answer("a")); err != nil {
		t.Fatal(err)
	}
	wantAnswer(t, s, "a", answer("a"))
	wantInFlight(t, s, "b")
	if err := s.Finish(t.Context(), "b", t2, nil); err != nil {
		t.Fatal(err)
	}
	mustLock(t, s, "c", minute)
}

func testIdemConcurrent(t *testing.T, h Harness) {
	s := h.Idempotency(t, day, 4)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		tokens []string
	)
	for i := range 16 {
		wg.Go(func() {
			a, token, err := s[i%len(s)].Acquire(context.Background(), "race", minute)
			if err != nil || a != nil {
				t.Errorf("Acquire = %v, %v", a, err)
			}
			if token != "" {
				mu.Lock()
				tokens = append(tokens, token)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(tokens) != 1 {
		t.Fatalf("%d of 16 concurrent Acquires got the lock, want exactly 1", len(tokens))
	}
}

func testIdemInvalid(t *testing.T, h Harness) {
	s := h.Idempotency(t, day, 1)[0]
	for _, key := range []string{"", "a:b", "a b", "{x}", "é", strings.Repeat("k", state.MaxKeyLen+1)} {
		if _, _, err := s.Acquire(t.Context(), key, minute); !errors.Is(err, state.ErrInvalidKey) {
			t.Errorf("Acquire(%q) = %v, want ErrInvalidKey", key, err)
		}
		if err := s.Finish(t.Context(), key, "t", answer("x")); !errors.Is(err, state.ErrInvalidKey) {
			t.Errorf("Finish(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
	if _, _, err := s.Acquire(t.Context(), "k", 0); err == nil {
		t.Error("Acquire with a lockTTL of 0: no error")
	}
	mustLock(t, s, "k", minute) // the refused calls took nothing
	mustLock(t, s, strings.Repeat("k", state.MaxKeyLen), minute)
}

// read is get's answer, or the test fails.
func read[T any](t *testing.T, get func(context.Context) (T, error)) T {
	t.Helper()
	v, err := get(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func testPauseUntilCleared(t *testing.T, h Harness) {
	p := h.Pause(t, 2)
	if st := read(t, p[1].Get); st != (state.PauseStatus{}) {
		t.Fatalf("fresh switch %+v, want off", st)
	}
	if err := p[0].Set(t.Context(), 0, "maintenance"); err != nil {
		t.Fatal(err)
	}
	if st := read(t, p[1].Get); st != (state.PauseStatus{On: true, Reason: "maintenance"}) {
		t.Fatalf("after Set(0) %+v, want on until cleared", st)
	}
	if err := p[1].Clear(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := read(t, p[0].Get); st != (state.PauseStatus{}) {
		t.Fatalf("after Clear %+v, want off", st)
	}
}

func testPauseTimed(t *testing.T, h Harness) {
	p := h.Pause(t, 2)
	if err := p[0].Set(t.Context(), minute, "slow down"); err != nil {
		t.Fatal(err)
	}
	st := read(t, p[1].Get)
	if !st.On || st.Reason != "slow down" || st.Remaining > minute || st.Remaining < 50*time.Second {
		t.Fatalf("after Set(1m) %+v, want on with about a minute left", st)
	}
	if err := p[0].Set(t.Context(), 150*time.Millisecond, "short"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the timed pause to end", func() bool { return read(t, p[1].Get) == state.PauseStatus{} })
}

func testPauseReplaces(t *testing.T, h Harness) {
	p := h.Pause(t, 2)
	if err := p[0].Set(t.Context(), minute, "a"); err != nil {
		t.Fatal(err)
	}
	if err := p[1].Set(t.Context(), 0, "b"); err != nil {
		t.Fatal(err)
	}
	if st := read(t, p[0].Get); st != (state.PauseStatus{On: true, Reason: "b"}) {
		t.Fatalf("timed then until-cleared: %+v", st)
	}
	if err := p[0].Set(t.Context(), minute, "c"); err != nil {
		t.Fatal(err)
	}
	if st := read(t, p[1].Get); !st.On || st.Reason != "c" || st.Remaining <= 0 || st.Remaining > minute {
		t.Fatalf("until-cleared then timed: %+v", st)
	}
}

func testPauseInvalid(t *testing.T, h Harness) {
	p := h.Pause(t, 1)[0]
	for _, tc := range []struct {
		d      time.Duration
		reason string
	}{{-time.Second, ""}, {500 * time.Microsecond, ""}, {0, strings.Repeat("r", state.MaxPauseReason+1)}} {
		if err := p.Set(t.Context(), tc.d, tc.reason); err == nil {
			t.Errorf("Set(%s, %d bytes): no error", tc.d, len(tc.reason))
		}
	}
	if st := read(t, p.Get); st != (state.PauseStatus{}) {
		t.Fatalf("refused Sets changed the switch: %+v", st)
	}
}

var counterFields = []string{"sent", "failed", "throttled"}

func testCountersAddRead(t *testing.T, h Harness) {
	c := h.Counters(t, counterFields, 2)
	got, since, err := c[1].Read(t.Context())
	if err != nil || len(got) != 3 || got["sent"] != 0 || got["failed"] != 0 || got["throttled"] != 0 || !since.IsZero() {
		t.Fatalf("fresh Read = %v, %v, %v; want every field 0 and a zero since", got, since, err)
	}
	got, since, err = c[0].Add(t.Context(), map[string]int64{"sent": 1, "failed": 2})
	if err != nil || got["sent"] != 1 || got["failed"] != 2 || got["throttled"] != 0 || len(got) != 3 {
		t.Fatalf("Add = %v, %v", got, err)
	}
	if d := time.Since(since); d < -minute || d > minute {
		t.Fatalf("since %v, want about now", since)
	}
	got, since2, err := c[1].Add(t.Context(), map[string]int64{"sent": 3, "throttled": 0})
	if err != nil || got["sent"] != 4 || got["failed"] != 2 || got["throttled"] != 0 || !since2.Equal(since) {
		t.Fatalf("second Add = %v, since %v (first %v), %v", got, since2, since, err)
	}
	read, since3, err := c[0].Read(t.Context())
	if err != nil || read["sent"] != 4 || read["failed"] != 2 || !since3.Equal(since) {
		t.Fatalf("Read = %v, %v, %v", read, since3, err)
	}
}

func testCountersUnknown(t *testing.T, h Harness) {
	c := h.Counters(t, counterFields, 1)[0]
	if _, _, err := c.Add(t.Context(), map[string]int64{"sent": 5, "bogus": 1}); !errors.Is(err, state.ErrUnknownField) {
		t.Fatalf("Add with an unknown field = %v, want ErrUnknownField", err)
	}
	if got, _, err := c.Read(t.Context()); err != nil || got["sent"] != 0 || len(got) != 3 {
		t.Fatalf("after a refused Add: %v, %v; want nothing added", got, err)
	}
}

func testCountersConcurrent(t *testing.T, h Harness) {
	c := h.Counters(t, counterFields, 4)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 25 {
				if _, _, err := c[i%len(c)].Add(context.Background(), map[string]int64{"sent": 1, "failed": 2}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got, _, err := c[0].Read(t.Context())
	if err != nil || got["sent"] != 200 || got["failed"] != 400 {
		t.Fatalf("after 200 concurrent Adds: %v, %v; want sent 200, failed 400", got, err)
	}
}

func testThrottlesRecordCount(t *testing.T, h Harness) {
	g := h.Throttles(t, 10*minute, 2)
	if n := read(t, g[1].Count); n != 0 {
		t.Fatalf("fresh window counts %d", n)
	}
	for i, s := range []state.Throttles{g[0], g[1], g[0]} {
		n, err := s.Record429(t.Context())
		if err != nil || n != i+1 {
			t.Fatalf("Record429 #%d = %d, %v; want %d", i+1, n, err, i+1)
		}
	}
	if n := read(t, g[1].Count); n != 3 {
		t.Fatalf("Count = %d, want 3", n)
	}
}

func testThrottlesWindow(t *testing.T, h Harness) {
	g := h.Throttles(t, 300*time.Millisecond, 2)
	for range 2 {
		if n, err := g[0].Record429(t.Context()); err != nil || n < 1 {
			t.Fatalf("Record429 = %d, %v", n, err)
		}
	}
	eventually(t, "the 429s to leave the window", func() bool { return read(t, g[1].Count) == 0 })
	if n, err := g[1].Record429(t.Context()); err != nil || n != 1 {
		t.Fatalf("Record429 on an emptied window = %d, %v; want 1", n, err)
	}
}

func testThrottlesConcurrent(t *testing.T, h Harness) {
	g := h.Throttles(t, 10*minute, 3)
	var wg sync.WaitGroup
	for _, s := range g {
		wg.Go(func() {
			for range 20 {
				if _, err := s.Record429(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := read(t, g[0].Count); n != 60 {
		t.Fatalf("Count after 60 concurrent 429s = %d", n)
	}
}

func testContextCancelled(t *testing.T, h Harness) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	idem := h.Idempotency(t, day, 1)[0]
	pause := h.Pause(t, 1)[0]
	counters := h.Counters(t, counterFields, 1)[0]
	throttles := h.Throttles(t, minute, 1)[0]
	numbers := h.NumberLimits(t, 1)[0]
	sup := h.Suppressions(t, 0, 1)[0]
	calls := map[string]func() error{
		"Acquire":    func() error { _, _, err := idem.Acquire(ctx, "k", minute); return err },
		"Finish":     func() error { return idem.Finish(ctx, "k", "t", nil) },
		"Set":        func() error { return pause.Set(ctx, 0, "") },
		"Clear":      func() error { return pause.Clear(ctx) },
		"Get":        func() error { _, err := pause.Get(ctx); return err },
		"Add":        func() error { _, _, err := counters.Add(ctx, map[string]int64{"sent": 1}); return err },
		"Read":       func() error { _, _, err := counters.Read(ctx); return err },
		"Record429":  func() error { _, err := throttles.Record429(ctx); return err },
		"Count":      func() error { _, err := throttles.Count(ctx); return err },
		"Take":       func() error { _, _, err := numbers.Take(ctx, "k", 1, minute); return err },
		"Return":     func() error { return numbers.Return(ctx, "k", "1") },
		"Suppress":   func() error { _, err := sup.Add(ctx, state.Suppression{ID: "k"}); return err },
		"Unsuppress": func() error { _, err := sup.Remove(ctx, "k"); return err },
		"Lift":       func() error { _, err := sup.Lift(ctx, "k", state.SourceRecipient); return err },
		"Contains":   func() error { _, err := sup.Contains(ctx, []string{"k"}); return err },
		"List":       func() error { _, err := sup.List(ctx, "", 10); return err },
		"Len":        func() error { _, err := sup.Count(ctx); return err },
		"Key":        func() error { _, err := sup.Key(ctx); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context = %v, want context.Canceled", name, err)
		}
	}
}
