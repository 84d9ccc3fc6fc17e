package admission

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/logtest"
	"smsgw/internal/queue"
	"smsgw/internal/state"
)

// fakeShelves counts what a ShelfKeeper asks; each producer's shelf holds
// left messages, emptied MaxRestore at a time, or fails with err.
type fakeShelves struct {
	mu    sync.Mutex
	left  map[string]int
	asked []string
	err   error
}

func (f *fakeShelves) SetAside(context.Context, *queue.Leased, queue.Shelf) error { return nil }

func (f *fakeShelves) Restore(_ context.Context, producer string, most int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, producer)
	if f.err != nil {
		return 0, f.err
	}
	n := min(f.left[producer], most)
	f.left[producer] -= n
	return n, nil
}

// TestShelfKeeper: at start every named producer not paused has its shelf
// emptied once; a paused one is left alone until its pause is lifted (or
// runs out), then emptied; once empty nothing is asked again; a failed
// restore is tried again on the next run.
func TestShelfKeeper(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	clock := func() time.Time { return now }
	p := NewOperatorPause(newLocalPause(), clock)
	sc := newLocalScoped(clock)
	p.SetScopes(sc, []string{"a", "b"})
	if err := p.PauseScope(ctx, Scope{Producer: "b"}, time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	f := &fakeShelves{left: map[string]int{"a": 3, "b": 2*queue.MaxRestore + 1}}
	var logs logtest.Buffer
	k := NewShelfKeeper(p, f, time.Hour, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err := k.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if f.left["a"] != 0 || f.left["b"] == 0 || slices.Contains(f.asked, "b") {
		t.Fatalf("at start: left %v, asked %v; want a's emptied and b's (paused) untouched", f.left, f.asked)
	}
	f.asked = nil
	if err := k.RunOnce(ctx); err != nil || len(f.asked) != 0 {
		t.Fatalf("nothing to do: asked %v (%v)", f.asked, err)
	}

	now = now.Add(2 * time.Minute) // b's pause runs out
	f.err = errors.New("store down")
	if err := k.RunOnce(ctx); err == nil {
		t.Fatal("a failed restore reported no error")
	}
	f.err = nil
	if err := k.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if f.left["b"] != 0 {
		t.Fatalf("after b's pause ran out %d are still shelved", f.left["b"])
	}
	if out := logs.String(); !strings.Contains(out, "cannot be put back in line yet") || !strings.Contains(out, `"messages":1001`) {
		t.Errorf("logs: %s", logs.String())
	}
	f.asked = nil
	if err := k.RunOnce(ctx); err != nil || len(f.asked) != 0 {
		t.Fatalf("once emptied: asked %v (%v)", f.asked, err)
	}
}

// TestLiftSeenAgain: a pause seen again between Lifted and Restored keeps
// the producer on the list, so that what it sets aside then is restored.
func TestLiftSeenAgain(t *testing.T) {
	ctx := context.Background()
	p := NewOperatorPause(newLocalPause(), time.Now)
	p.SetScopes(newLocalScoped(time.Now), nil)
	if err := p.PauseScope(ctx, Scope{Producer: "a"}, 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := p.ResumeScope(ctx, Scope{Producer: "a"}); err != nil {
		t.Fatal(err)
	}
	lifts := p.Lifted()
	if len(lifts) != 1 || lifts[0].Producer != "a" {
		t.Fatalf("lifted %v, want a", lifts)
	}
	if err := p.PauseScope(ctx, Scope{Producer: "a"}, 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := p.ResumeScope(ctx, Scope{Producer: "a"}); err != nil {
		t.Fatal(err)
	}
	p.Restored(lifts[0])
	if again := p.Lifted(); len(again) != 1 {
		t.Fatalf("a pause seen again was forgotten: lifted %v", again)
	}
	p.Restored(p.Lifted()[0])
	if again := p.Lifted(); len(again) != 0 {
		t.Fatalf("lifted %v after restore", again)
	}
}

func newLocalPause() state.Pause { return state.NewLocalPause() }

// clockScoped is a state.ScopedPauses on the test's clock.
type clockScoped struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]time.Time // zero: until cleared
}

func newLocalScoped(now func() time.Time) *clockScoped {
	return &clockScoped{now: now, m: map[string]time.Time{}}
}

func (c *clockScoped) Set(_ context.Context, scope string, d time.Duration, _ string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var until time.Time
	if d > 0 {
		until = c.now().Add(d)
	}
	c.m[scope] = until
	return nil
}

func (c *clockScoped) Clear(_ context.Context, scope string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, scope)
	return nil
}

func (c *clockScoped) All(context.Context) (map[string]state.PauseStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]state.PauseStatus{}
	for s, u := range c.m {
		switch {
		case u.IsZero():
			out[s] = state.PauseStatus{On: true}
		case u.After(c.now()):
			out[s] = state.PauseStatus{On: true, Remaining: u.Sub(c.now())}
		}
	}
	return out, nil
}
