package statetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"smsgw/internal/state"
)

// StickySenders.
//   - Stick of a key that holds nothing returns "" and makes it hold the
//     sender offered, for every handle; a later Stick returns that sender
//     whatever it offers, and keys are independent. Set replaces a key's
//     sender.
//   - An entry expires ttl after its last Stick or Set: a Stick restarts
//     it with its own ttl.
//   - Of concurrent Sticks of a fresh key exactly one returns "", and all
//     the others return its sender.
//   - Keys ValidKey refuses are ErrInvalidKey; keys and senders of
//     different lengths, an empty sender and a ttl under 1 ms are
//     ErrInvalidSticky.

func stick(t *testing.T, s state.StickySenders, ttl time.Duration, keys []string, senders ...string) []string {
	t.Helper()
	got, err := s.Stick(context.Background(), keys, senders, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func testStickyKeepsAndSets(t *testing.T, h Harness) {
	s := h.StickySenders(t, 2)
	if got := stick(t, s[0], minute, []string{"a", "b"}, "S1", "S2"); got[0] != "" || got[1] != "" {
		t.Fatalf("fresh keys hold %q", got)
	}
	if got := stick(t, s[1], minute, []string{"b", "a", "c"}, "S9", "S9", "S3"); got[0] != "S2" || got[1] != "S1" || got[2] != "" {
		t.Fatalf("second Stick on another handle: %q, want [S2 S1 \"\"]", got)
	}
	if err := s[1].Set(context.Background(), "a", "S4", minute); err != nil {
		t.Fatal(err)
	}
	if got := stick(t, s[0], minute, []string{"a"}, "S9"); got[0] != "S4" {
		t.Fatalf("after Set: %q, want S4", got)
	}
}

func testStickyExpires(t *testing.T, h Harness) {
	s := h.StickySenders(t, 1)[0]
	stick(t, s, minute, []string{"k"}, "S1")
	// A Stick restarts the entry with its own ttl: a minute's entry, stuck
	// with 1 ms, is gone 1 ms later (each poll restarts it with 1 ms).
	eventually(t, "the entry to expire", func() bool {
		switch got := stick(t, s, time.Millisecond, []string{"k"}, "S2"); got[0] {
		case "":
			return true
		case "S1":
			return false
		default:
			t.Fatalf("held %q, want S1 or nothing", got[0])
			return false
		}
	})
}

func testStickyConcurrent(t *testing.T, h Harness) {
	s := h.StickySenders(t, 3)
	var mu sync.Mutex
	held := map[string]int{}
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			got, err := s[i%3].Stick(context.Background(), []string{"hot"}, []string{"S" + string(rune('a'+i))}, minute)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			held[got[0]]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(held) != 2 || held[""] != 1 {
		t.Fatalf("concurrent Sticks of one key answered %v, want one \"\" and 29 of one sender", held)
	}
}

func testStickyInvalid(t *testing.T, h Harness) {
	s := h.StickySenders(t, 1)[0]
	ctx := t.Context()
	if _, err := s.Stick(ctx, []string{"a b"}, []string{"S"}, minute); !errors.Is(err, state.ErrInvalidKey) {
		t.Errorf("bad key: %v", err)
	}
	for name, c := range map[string]struct {
		keys, senders []string
		ttl           time.Duration
	}{
		"lengths": {[]string{"a"}, nil, minute},
		"empty":   {[]string{"a"}, []string{""}, minute},
		"ttl":     {[]string{"a"}, []string{"S"}, time.Microsecond},
	} {
		if _, err := s.Stick(ctx, c.keys, c.senders, c.ttl); !errors.Is(err, state.ErrInvalidSticky) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := s.Set(ctx, "a", "", minute); !errors.Is(err, state.ErrInvalidSticky) {
		t.Errorf("Set of an empty sender: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Stick(cctx, []string{"a"}, []string{"S"}, minute); !errors.Is(err, context.Canceled) {
		t.Errorf("Stick with a cancelled context = %v", err)
	}
	if err := s.Set(cctx, "a", "S", minute); !errors.Is(err, context.Canceled) {
		t.Errorf("Set with a cancelled context = %v", err)
	}
}
