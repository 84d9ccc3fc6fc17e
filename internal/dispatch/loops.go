package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/tick"
)

// loop runs once every period, the first one period after Start, until
// stopped (tick.Loop): the shape of every background loop here
// (heartbeat, recoverer, guard refresh). Stop waits for a round in
// progress; Dispatcher.Stop cancels the rounds' context first.
type loop struct {
	every time.Duration
	once  func(context.Context)
	run   tick.Loop
}

func newLoop(every time.Duration, once func(context.Context)) *loop {
	return &loop{every: every, once: once}
}

// Start runs the loop until Stop or until ctx ends.
func (l *loop) Start(ctx context.Context) { l.run.Start(ctx, l.every, tick.Options{}, l.once) }

// Stop ends the loop and waits for a running round to finish.
func (l *loop) Stop() { l.run.Stop() }

// heartbeat extends the lease of every message this process holds, so that
// a send waiting on a slot or a slow provider never loses its lease. A lease
// found lost is marked so that the sender does not send it.
type heartbeat struct {
	*loop
	flights   func() []*flight
	extend    func(context.Context, *queue.Leased, time.Duration) error
	lease     time.Duration
	log       *slog.Logger
	m         *metrics
	noteError func()
	// tracked reports whether a flight is still in flight: one that was
	// acked between the snapshot and its Extend loses its lease by design.
	tracked func(*flight) bool
	// clock is sinceEpoch: the moment an Extend is asked, stored in the
	// flight's confirmed once the queue grants it.
	clock func() int64
}

func newHeartbeat(d *Dispatcher) *heartbeat {
	h := &heartbeat{flights: d.inFlight, extend: d.cfg.Queue.Extend, lease: d.cfg.Lease, log: d.log, m: d.m,
		noteError: d.noteQueueError, tracked: d.tracked, clock: d.sinceEpoch}
	h.loop = newLoop(max(d.cfg.Lease/3, time.Millisecond), h.runOnce)
	return h
}

func (h *heartbeat) runOnce(ctx context.Context) {
	for _, f := range h.flights() {
		asked := h.clock()
		err := h.extend(ctx, f.l, h.lease)
		switch {
		case err == nil:
			f.confirmed.Store(asked)
		case errors.Is(err, queue.ErrLeaseLost):
			if h.tracked != nil && !h.tracked(f) {
				continue // acked meanwhile: its lease ended normally
			}
			f.lost.Store(true)
			h.m.loopErrors.WithLabelValues("extend").Inc()
			h.log.Warn("heartbeat: lease lost", "id", f.l.Message.ID)
		case ctx.Err() != nil:
			return
		default:
			h.noteError()
			h.m.loopErrors.WithLabelValues("extend").Inc()
			h.log.Warn("heartbeat: extend failed", "id", f.l.Message.ID, "err", err)
		}
	}
}

// recoverer hands expired leases (of a replica that died) back to the queue.
// Every replica runs one; Recover is atomic per lease, so they never clash.
// recoverer hands expired leases on. After a queue error (Redis down) it
// holds back for one lease from the last error: leases expire on Redis's
// clock while Redis is unreachable, and their live holders are still
// retrying their acks; recovering at once would hand a message already sent
// to another replica, which would send it again. A dead holder's messages
// wait one lease longer; nothing is lost.
type recoverer struct {
	*loop
	recover   func(context.Context) (int, error)
	log       *slog.Logger
	m         *metrics
	grace     time.Duration
	sinceErr  func() (time.Duration, bool)
	noteError func()
}

func newRecoverer(d *Dispatcher) *recoverer {
	r := &recoverer{recover: d.cfg.Queue.Recover, log: d.log, m: d.m, grace: d.cfg.Lease,
		sinceErr: d.sinceQueueError, noteError: d.noteQueueError}
	r.loop = newLoop(d.cfg.RecoverEvery, r.runOnce)
	return r
}

func (r *recoverer) runOnce(ctx context.Context) {
	if since, ok := r.sinceErr(); ok && since < r.grace {
		return
	}
	n, err := r.recover(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.noteError()
			r.m.loopErrors.WithLabelValues("recover").Inc()
			r.log.Warn("recoverer: recover failed", "err", err)
		}
		return
	}
	if n > 0 {
		r.log.Info("recoverer: expired leases handed back", "count", n)
	}
}

// refreshGuard reads the shared 429 count, so that every replica slows down
// when any of them saw too many.
// An idle replica (nothing sent for two periods) reads it only every
// guardIdleRefresh; its first send reserves with a count at most that old.
func (d *Dispatcher) refreshGuard(ctx context.Context) {
	if d.Idle(2*d.cfg.GuardRefresh) && time.Since(d.epoch)-time.Duration(d.guardReadAt.Load()) < guardIdleRefresh {
		return
	}
	n, err := d.cfg.Guard.Count(ctx)
	if err != nil {
		if ctx.Err() == nil {
			d.m.loopErrors.WithLabelValues("guard").Inc()
			if n, ok := d.guardFailed.Add(time.Now(), failureLogEvery); ok {
				d.log.Warn("suspension guard: count failed", "failures", n, "err", err)
			}
		}
		return
	}
	d.guardFailed.Reset()
	d.guardReadAt.Store(int64(time.Since(d.epoch)))
	d.setGuardCount(n)
}

// guardIdleRefresh is how often an idle replica reads the guard's count.
const guardIdleRefresh = 10 * time.Second
