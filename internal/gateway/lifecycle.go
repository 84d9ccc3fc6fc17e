package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"smsgw/internal/periodic"
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

// ticker runs a loop's runOnce at start and then every period, each run
// bounded by the period, from start until halt or until ctx ends
// (periodic.Loop). With quiet set, a period in which the replica is idle
// runs only once quietEvery has passed since the last run: loops that read
// shared state a sender needs slow down while nothing is sent, so that an
// idle fleet costs Redis little.
type ticker struct {
	run        periodic.Loop
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
	due := func(last time.Time) bool {
		return last.IsZero() || time.Since(last) >= t.quietEvery || !t.quiet.idle()
	}
	t.run.Start(ctx, every, periodic.Options{AtStart: true, Bounded: true, Due: due}, func(rctx context.Context) {
		_ = runOnce(rctx) // each runOnce logs its own failures
	})
}

// halt stops the loop and waits for it; false when it was not running.
func (t *ticker) halt() bool { return t.run.Stop() }

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
