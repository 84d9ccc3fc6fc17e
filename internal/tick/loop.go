// Package tick runs the process's background loops: Loop, one round every
// period, is the one shape of them all (the send loop's heartbeat,
// recoverer and guard refresh; the history recorder; the Tickers of the
// pause poller, stats totals, compactor and limiter probe, which slow down
// while the replica is idle).
package tick

import (
	"context"
	"time"
)

// Options shape a Loop's rounds; the zero value runs the first round one
// period after Start and every round with Start's context.
type Options struct {
	// AtStart runs the first round at Start, without waiting a period.
	AtStart bool
	// Bounded ends each round's context one period after the round began.
	Bounded bool
	// Due, when set, is asked before each round with when the last round
	// began (zero: none yet); false skips the round.
	Due func(last time.Time) bool
}

// Loop runs round every period in a goroutine of its own, from Start until
// Stop or until Start's context ends. The zero value is ready to Start; a
// stopped Loop may be started again.
type Loop struct {
	stop chan struct{}
	done chan struct{}
}

// Start runs the loop. Call it once per Stop.
func (l *Loop) Start(ctx context.Context, every time.Duration, o Options, round func(context.Context)) {
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	stop, done := l.stop, l.done
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		var last time.Time
		wait := !o.AtStart
		for {
			if wait {
				select {
				case <-tick.C:
				case <-stop:
					return
				case <-ctx.Done():
					return
				}
			}
			wait = true
			if o.Due != nil && !o.Due(last) {
				continue
			}
			last = time.Now()
			rctx, cancel := ctx, context.CancelFunc(func() {})
			if o.Bounded {
				rctx, cancel = context.WithTimeout(ctx, every)
			}
			round(rctx)
			cancel()
		}
	}()
}

// Stop ends the loop and waits for a round in progress to finish (it is
// not canceled: end Start's context for that); false when the loop was not
// running.
func (l *Loop) Stop() bool {
	if l.stop == nil {
		return false
	}
	close(l.stop)
	<-l.done
	l.stop = nil
	return true
}
