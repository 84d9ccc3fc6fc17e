// Package otprecords bounds and tracks the status records of fast-path
// OTPs the API writes in the background (after their answer, or retried
// while the store is down), so that a stopping App waits for them before
// it closes the store.
package otprecords

import (
	"context"
	"sync"

	"smsgw/internal/logsample"
)

// Records tracks the status records of fast-path OTPs written in the
// background (after their answer, or retried while the store is down), so
// that a stopping App waits for them before it closes the store, and
// bounds how many are in flight.
type Records struct {
	Mu      sync.Mutex
	Closing bool // set by close: no more goroutines start
	wg      sync.WaitGroup
	Slots   chan struct{}     // one per record in flight
	Failed  logsample.Sampler // samples the log of records given up
	Retried logsample.Sampler // samples the log of records put off
	// Ctx ends when close gives up waiting: writes in flight end with it.
	Ctx    context.Context
	cancel context.CancelFunc
	// stopping is closed by close: a record that fails then is given up
	// instead of waiting for the next try.
	stopping chan struct{}
}

// Init readies the table of OTP records still to write.
func (r *Records) Init() {
	r.Slots = make(chan struct{}, MaxInFlight)
	r.Ctx, r.cancel = context.WithCancel(context.Background())
	r.stopping = make(chan struct{})
}

// Start reserves a slot for a background write; false when closing or
// when every slot is taken.
func (r *Records) Start() bool {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	if r.Closing {
		return false
	}
	select {
	case r.Slots <- struct{}{}:
		r.wg.Add(1)
		return true
	default:
		return false
	}
}

// Stopping is closed by Close: a record that fails then is given up
// instead of waiting for the next try.
func (r *Records) Stopping() <-chan struct{} { return r.stopping }

// Done marks one OTP record written or given up.
func (r *Records) Done() {
	<-r.Slots
	r.wg.Done()
}

// Close stops new background writes and gives up retrying, then waits for
// the writes in flight, or until ctx ends: then it cuts them short and
// waits for them to return (they end with r.ctx), so nothing it started
// outlives it.
func (r *Records) Close(ctx context.Context) {
	r.Mu.Lock()
	if !r.Closing {
		r.Closing = true
		close(r.stopping)
	}
	r.Mu.Unlock()
	ended := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-ctx.Done():
		r.cancel()
		<-ended
	}
	r.cancel()
}

// MaxInFlight bounds the records written in the background;
// past it a record is not written (counted and logged): the answers of
// OTPs do not wait for a store that slow.
const MaxInFlight = 256
