package tick

import (
	"context"
	"sync/atomic"
	"time"
)

// Ticker runs a loop's runOnce every period, each run bounded by the
// period, from start until halt or until ctx ends. With quiet set, a
// period in which the replica is idle runs only once quietEvery has passed
// since the last run: loops that read shared state a sender needs slow
// down while nothing is sent, so that an idle fleet costs Redis little.
type Ticker struct {
	stop       chan struct{}
	done       chan struct{}
	Quiet      *QuietGate
	QuietEvery time.Duration
}

// QuietGate tells whether the replica is idle; set once the dispatcher
// exists (before Start).
type QuietGate struct {
	f atomic.Pointer[func() bool]
}

func (g *QuietGate) Set(f func() bool) { g.f.Store(&f) }

func (g *QuietGate) Idle() bool {
	if g == nil {
		return false
	}
	f := g.f.Load()
	return f != nil && (*f)()
}

func (t *Ticker) Start(ctx context.Context, every time.Duration, runOnce func(context.Context) error) {
	t.stop, t.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(t.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		var last time.Time
		for {
			if last.IsZero() || time.Since(last) >= t.QuietEvery || !t.Quiet.Idle() {
				last = time.Now()
				rctx, cancel := context.WithTimeout(ctx, every)
				_ = runOnce(rctx) // each runOnce logs its own failures
				cancel()
			}
			select {
			case <-tick.C:
			case <-t.stop:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
}

// Halt stops the loop and waits for it; false when it was not running.
func (t *Ticker) Halt() bool {
	if t.stop == nil {
		return false
	}
	close(t.stop)
	<-t.done
	t.stop = nil
	return true
}
