package tick

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestLoopRounds: a round runs every period, the first at Start only with
// AtStart; Due skips the rounds it refuses; Bounded gives each round a
// deadline one period away; Stop ends the loop and says whether it ran.
func TestLoopRounds(t *testing.T) {
	const every = time.Second
	for _, tc := range []struct {
		name string
		o    Options
		// want is the rounds begun within 3.5 periods of Start.
		want int
	}{
		{"after a period", Options{}, 3},
		{"at start", Options{AtStart: true}, 4},
		{"every other round due", Options{AtStart: true, Due: func(last time.Time) bool {
			return last.IsZero() || time.Since(last) >= 2*every
		}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var rounds atomic.Int32
				var l Loop
				l.Start(t.Context(), every, tc.o, func(ctx context.Context) {
					if _, ok := ctx.Deadline(); ok {
						t.Error("an unbounded round has a deadline")
					}
					rounds.Add(1)
				})
				time.Sleep(3*every + every/2)
				synctest.Wait()
				if !l.Stop() {
					t.Fatal("Stop of a running loop reported it was not running")
				}
				if got := int(rounds.Load()); got != tc.want {
					t.Errorf("rounds = %d, want %d", got, tc.want)
				}
				time.Sleep(2 * every)
				if got := int(rounds.Load()); got != tc.want {
					t.Errorf("rounds after Stop = %d, want %d", got, tc.want)
				}
				if l.Stop() {
					t.Error("a second Stop reported a running loop")
				}
			})
		})
	}
}

// TestLoopBoundedAndCanceled: a bounded round's context ends one period
// after it began; ending Start's context ends the loop and its round.
func TestLoopBoundedAndCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = time.Second
		ctx, cancel := context.WithCancel(t.Context())
		var l Loop
		ended := make(chan error, 1)
		var first atomic.Bool
		l.Start(ctx, every, Options{AtStart: true, Bounded: true}, func(rctx context.Context) {
			if first.Swap(true) {
				return // the rounds after the first: the loop runs on until canceled
			}
			begun := time.Now()
			<-rctx.Done()
			if got := time.Since(begun); got != every {
				t.Errorf("round's context ended after %s, want %s", got, every)
			}
			ended <- rctx.Err()
		})
		if err := <-ended; err != context.DeadlineExceeded {
			t.Errorf("round ended with %v, want the deadline", err)
		}
		cancel()
		synctest.Wait()
		select {
		case <-l.done:
		default:
			t.Error("the loop runs on after its context ended")
		}
		l.Stop()
	})
}
