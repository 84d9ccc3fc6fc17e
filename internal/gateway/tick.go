package gateway

import (
	"context"
	"sync/atomic"
	"time"
)

// ticker runs a loop's runOnce every period, each run bounded by the
// period, from start until halt or until ctx ends. With quiet set, a
// period in which the replica is idle runs only once quietEvery has passed
// since the last run: loops that read shared state a sender needs slow
// down while nothing is sent, so that an idle fleet costs Redis little.
type ticker struct {
	stop       chan struct{}
	done       chan struct{}
	quiet      *quietGate
	quietEvery time.Duration
}

// quietGate tells whether the replica is idle; set once the dispatcher
// exists (before Start).
type quietGate struct {
	f atomic.Pointer[func() bool]
}

func (g *quietGate) set(f func() bool) { g.f.Store(&f) }

func (g *quietGate) idle() bool {
	if g == nil {
		return false
	}
	f := g.f.Load()
	return f != nil && (*f)()
}

func (t *ticker) start(ctx context.Context, every time.Duration, runOnce func(context.Context) error) {
	t.stop, t.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(t.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		var last time.Time
		for {
			if last.IsZero() || time.Since(last) >= t.quietEvery || !t.quiet.idle() {
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

// halt stops the loop and waits for it; false when it was not running.
func (t *ticker) halt() bool {
	if t.stop == nil {
		return false
	}
	close(t.stop)
	<-t.done
	t.stop = nil
	return true
}
