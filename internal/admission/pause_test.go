package admission

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
	"smsgw/internal/limiter"
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
			sp, err := keyspace.New(redistest.Prefix(t))
			if err != nil {
				t.Fatal(err)
			}
			store, err := state.NewRedisPause(c, sp)
			if err != nil {
				t.Fatal(err)
			}
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
	sp, err := keyspace.New(redistest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	store, err := state.NewRedisPause(c, sp)
	if err != nil {
		t.Fatal(err)
	}
	other, idle := NewOperatorPause(store, time.Now), NewOperatorPause(store, time.Now)
	if err := idle.refresh(ctx); err != nil { // its last poll: not paused
		t.Fatal(err)
	}
	if err := other.Pause(ctx, 0, "maintenance"); err != nil {
		t.Fatal(err)
	}
	// Its poller slept; the copy is now older than a sending replica's.
	idle.mu.Lock()
	idle.readAt = idle.readAt.Add(-2 * pauseStaleAfter)
	idle.mu.Unlock()
	lim, err := limiter.NewLocal(limiter.Config{Global: limiter.Rate{PerSecond: 90, Burst: 5}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := PausedLimiter{Limiter: lim, P: idle}.Reserve(ctx, limiter.Request{Class: "otp", Cost: 1, MaxWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || !d.Paused {
		t.Errorf("reservation on a stale copy of the switch: %+v, want paused", d)
	}
}
