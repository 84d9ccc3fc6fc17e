package dispatch

import (
	"context"
	"errors"

	"smsgw/internal/queue"
)

// Start runs the lanes and the background loops until Stop or until ctx
// ends. Ending ctx is a crash: nothing is put back, leases expire and the
// recoverer of another replica hands the messages on.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		return errors.New("dispatch: already started")
	}
	d.started = true
	d.runCtx, d.cancelRun = context.WithCancel(ctx)
	d.takeCtx, d.cancelTake = context.WithCancel(d.runCtx)

	d.loops = []backgroundLoop{newHeartbeat(d), newRecoverer(d)}
	if d.cfg.Guard != nil {
		d.loops = append(d.loops, newLoop(d.cfg.GuardRefresh, d.refreshGuard))
	}
	for _, l := range d.loops {
		l.Start(d.runCtx)
	}
	if n, ok := d.cfg.Queue.(queue.Notifier); ok {
		d.listening.Add(1)
		go func() {
			defer d.listening.Done()
			// Ends with the takes: a stopping process hands its wake-ups on.
			n.Listen(d.takeCtx, d.wakeIfIdle, d.readyToTake)
		}()
	}
	for _, ln := range d.lanes {
		d.pacers.Add(1)
		go func() {
			defer d.pacers.Done()
			d.pace(ln)
		}()
	}
	d.log.Info("send loop started", "workers", d.cfg.Workers, "otp_workers", d.cfg.OTPWorkers, "lease", d.cfg.Lease)
	return nil
}

// sending counts the sends in progress: the flights not being acked.
func (d *Dispatcher) sending() int {
	n := 0
	for _, f := range d.inFlight() {
		if !f.acking.Load() {
			n++
		}
	}
	return n
}

// Stop ends the send loop gracefully: no more takes; messages held for a
// slot are put back at once; sends in progress finish while ctx allows.
// When ctx ends first those sends are cut short and their messages put back
// without spending an attempt (the provider may have them: the id is the
// idempotency key of the next attempt); Stop then returns a *CutShortError
// (ErrSendsCutShort).
func (d *Dispatcher) Stop(ctx context.Context) error {
	d.mu.Lock()
	if !d.started || d.stopped {
		d.mu.Unlock()
		return nil
	}
	d.stopped = true
	d.mu.Unlock()

	d.cancelTake()
	d.pacers.Wait()

	done := make(chan struct{})
	go func() { d.senders.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		cut := d.sending()
		rctx := context.WithoutCancel(ctx)
		d.releaseCtx.Store(&rctx)
		d.cancelRun()
		<-done
		err = &CutShortError{Sends: cut, Cause: ctx.Err()}
	}
	d.cancelRun() // ends the loops' rounds in progress
	for _, l := range d.loops {
		l.Stop()
	}
	d.listening.Wait()
	d.log.Info("send loop stopped", "graceful", err == nil)
	return err
}
