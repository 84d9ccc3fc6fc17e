package admission

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
	"smsgw/internal/limiter"
	"smsgw/internal/logtest"
	"smsgw/internal/queue"
	"smsgw/internal/redistest"
	"smsgw/internal/state"
)

// TestPausePollNeverUndoesALocalChange: a poll of the shared switch whose
// read was answered before this process paused (or resumed), and which
// records its answer after, must not undo the change. It did: the pause
// was lifted until the next poll and queued messages were sent meanwhile.
func TestPausePollNeverUndoesALocalChange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		before     func(p *OperatorPause, ctx context.Context) error // the state the poll reads
		change     func(p *OperatorPause, ctx context.Context) error // made while the poll's answer is in flight
		wantPaused bool
	}{
		{"pause", (*OperatorPause).Resume, pauseFor(0), true},
		{"resume", pauseFor(0), (*OperatorPause).Resume, false},
		{"timed pause", (*OperatorPause).Resume, pauseFor(time.Hour), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			c := redistest.Client(t)
			sp, store := redisPauseStore(t, c)
			hook := &afterPipeline{key: sp.Key("api", "pause")}
			c.AddHook(hook)
			p := NewOperatorPause(store, time.Now)
			if err := tc.before(p, ctx); err != nil {
				t.Fatal(err)
			}
			var changeErr error
			change := func() { changeErr = tc.change(p, ctx) }
			hook.f.Store(&change)
			if err := p.refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if changeErr != nil {
				t.Fatal(changeErr)
			}
			if hook.f.Load() != nil {
				t.Fatal("the poll sent no pipeline")
			}
			if got := p.Active(time.Now()); got != tc.wantPaused {
				t.Errorf("after the racing poll paused=%v, want %v", got, tc.wantPaused)
			}
			// The next poll reads the change and keeps it.
			if err := p.refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if got := p.Active(time.Now()); got != tc.wantPaused {
				t.Errorf("after the next poll paused=%v, want %v", got, tc.wantPaused)
			}
		})
	}
}

// redisPauseStore is the shared pause switch of a fresh account on c.
func redisPauseStore(t *testing.T, c redis.UniversalClient) (keyspace.Space, *state.RedisPause) {
	t.Helper()
	sp, err := keyspace.New(redistest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	store, err := state.NewRedisPause(c, sp)
	if err != nil {
		t.Fatal(err)
	}
	return sp, store
}

// staleCopy ages p's copy of the switch past pauseStaleAfter (as if its
// poller slept) and puts p in front of a local limiter.
func staleCopy(t *testing.T, p *OperatorPause) PausedLimiter {
	t.Helper()
	p.mu.Lock()
	p.readAt = p.readAt.Add(-2 * pauseStaleAfter)
	p.mu.Unlock()
	lim, err := limiter.NewLocal(limiter.Config{Global: limiter.Rate{PerSecond: 90, Burst: 5}})
	if err != nil {
		t.Fatal(err)
	}
	return PausedLimiter{Limiter: lim, P: p}
}

func pauseFor(d time.Duration) func(*OperatorPause, context.Context) error {
	return func(p *OperatorPause, ctx context.Context) error { return p.Pause(ctx, d, "maintenance") }
}

// afterPipeline runs f (once) when the answer to a pipeline reading key has
// arrived, before the caller sees it. (go-redis also pipelines its own
// commands when it opens a connection.)
type afterPipeline struct {
	key string
	f   atomic.Pointer[func()]
}

func (h *afterPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *afterPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *afterPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if len(cmds) == 0 || len(cmds[0].Args()) < 2 || cmds[0].Args()[1] != h.key {
			return err
		}
		if f := h.f.Swap(nil); f != nil {
			(*f)()
		}
		return err
	}
}

// TestIdleReplicaReadsThePauseBeforeSending: an idle replica polls the
// shared switch only every pauseIdlePoll, so its copy may be old when a
// send comes; its first reservation rereads the switch, and a pause
// another replica set meanwhile holds. (Without that read the reservation
// went on the stale copy and was granted.)
func TestIdleReplicaReadsThePauseBeforeSending(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := redistest.Client(t)
	_, store := redisPauseStore(t, c)
	other, idle := NewOperatorPause(store, time.Now), NewOperatorPause(store, time.Now)
	if err := idle.refresh(ctx); err != nil { // its last poll: not paused
		t.Fatal(err)
	}
	if err := other.Pause(ctx, 0, "maintenance"); err != nil {
		t.Fatal(err)
	}
	// Its poller slept; the copy is now older than a sending replica's.
	d, err := staleCopy(t, idle).Reserve(ctx, limiter.Request{Class: "otp", Cost: 1, MaxWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || !d.Paused {
		t.Errorf("reservation on a stale copy of the switch: %+v, want paused", d)
	}
}

// TestReservationDoesNotWaitForAFailingPauseStore: while the shared
// switch cannot be read (Redis gone: its poller's reads fail), a stale
// copy is not reread by a reservation, which would wait a whole Redis
// timeout for it: every OTP's deadline went on that read during an
// outage. The last known state holds, as the poller keeps it.
func TestReservationDoesNotWaitForAFailingPauseStore(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	reads := &redistest.RoundTrips{}
	c.AddHook(reads)
	_, store := redisPauseStore(t, c)
	p := NewOperatorPause(store, time.Now)
	if err := p.refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := p.refresh(ctx); err == nil { // the poller's read fails
		t.Fatal("a read of a stopped Redis succeeded")
	}
	lim := staleCopy(t, p)
	before := reads.N()
	d, err := lim.Reserve(ctx, limiter.Request{Class: "otp", Cost: 1, MaxWait: time.Second})
	if err != nil || !d.Allowed {
		t.Fatalf("reservation while the switch cannot be read: %+v %v, want granted on the last known state", d, err)
	}
	if n := reads.N() - before; n != 0 {
		t.Errorf("the reservation read the failing store %d times; want none (the poller keeps trying)", n)
	}
}

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
