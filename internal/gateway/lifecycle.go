package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"smsgw/internal/queue"
)

// What the App starts and stops besides the HTTP server and the dispatcher:
// loops, which Start starts and Stop stops (last started first), and a stop
// stack of what New opened, which Stop (or a failing New) closes, last
// opened first.

// loop is a background task of the App: nothing of it runs before Start.
type loop interface {
	Start(ctx context.Context)
	Stop()
}

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

// idleQuiet is how long a replica must have sent nothing to count as idle.
const idleQuiet = 2 * time.Second

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

// stopStack closes what New opened, last opened first.
type stopStack struct {
	steps []stopStep
}

type stopStep struct {
	name string
	stop func() error
}

// push adds a closer; it runs before every closer pushed earlier.
func (s *stopStack) push(name string, stop func() error) {
	s.steps = append(s.steps, stopStep{name: name, stop: stop})
}

// run runs every closer, last pushed first, even after one fails; each
// failure is logged with the closer's name and returned joined. A queue
// already closed is not a failure. The stack is empty afterwards.
func (s *stopStack) run(log *slog.Logger) error {
	var errs []error
	for i := len(s.steps) - 1; i >= 0; i-- {
		st := s.steps[i]
		if err := st.stop(); err != nil && !errors.Is(err, queue.ErrClosed) {
			log.Warn("close failed", "step", st.name, "err", err)
			errs = append(errs, fmt.Errorf("close %s: %w", st.name, err))
		}
	}
	s.steps = nil
	return errors.Join(errs...)
}
