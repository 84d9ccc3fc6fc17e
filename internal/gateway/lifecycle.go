package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// idleQuiet is how long a replica must have sent nothing to count as idle.
const idleQuiet = 2 * time.Second

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
