package tick

import (
	"context"
	"sync/atomic"
	"time"
)

// Ticker runs a loop's runOnce at Start and then every period, each run
// bounded by the period, until Halt or until ctx ends (a Loop). With Quiet
// set, a period in which the replica is idle runs only once QuietEvery has
// passed since the last run: loops that read shared state a sender needs
// slow down while nothing is sent, so that an idle fleet costs Redis little.
type Ticker struct {
	run        Loop
	Quiet      *QuietGate
	QuietEvery time.Duration
}

// QuietGate tells whether the replica is idle; set once the dispatcher
// exists (before Start).
type QuietGate struct {
	f atomic.Pointer[func() bool]
}

// Set gives the gate the replica's idleness test.
func (g *QuietGate) Set(f func() bool) { g.f.Store(&f) }

// Idle reports whether the replica is idle; false on a nil gate or before
// Set.
func (g *QuietGate) Idle() bool {
	if g == nil {
		return false
	}
	f := g.f.Load()
	return f != nil && (*f)()
}

// Start runs runOnce at once and then every period, until Halt or until
// ctx ends.
func (t *Ticker) Start(ctx context.Context, every time.Duration, runOnce func(context.Context) error) {
	due := func(last time.Time) bool {
		return last.IsZero() || time.Since(last) >= t.QuietEvery || !t.Quiet.Idle()
	}
	t.run.Start(ctx, every, Options{AtStart: true, Bounded: true, Due: due}, func(rctx context.Context) {
		_ = runOnce(rctx) // each runOnce logs its own failures
	})
}

// Halt stops the loop and waits for it; false when it was not running.
func (t *Ticker) Halt() bool { return t.run.Stop() }

// Sleep sleeps d unless ctx ends first; it reports whether d passed (a d
// of zero or less passes at once while ctx is live).
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
