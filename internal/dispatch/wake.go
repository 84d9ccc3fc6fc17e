package dispatch

import (
	"context"
	"time"

	"smsgw/internal/sms"
)

// Notify wakes the lane serving class c, so that a message just enqueued is
// taken without waiting for the next poll. The API calls it after each
// enqueue of this process, the wake-up listener (queue.Notifier) for those
// of every other; it never blocks.
func (d *Dispatcher) Notify(c sms.Class) {
	for _, ln := range d.lanes {
		if ln.serves(c) {
			select {
			case ln.wake <- struct{}{}:
			default:
			}
		}
	}
}

// wakeIfIdle wakes the lanes serving c (Notify) and reports whether one of
// them waits on an empty queue, so takes at once (queue.Notifier).
func (d *Dispatcher) wakeIfIdle(c sms.Class) bool {
	seen := d.emptyTakes.Load() // before the look: an empty take after it counts as new
	idle := d.TakesHere(c)
	if !idle {
		d.missedAt.Store(seen)
	}
	d.Notify(c)
	return idle
}

// TakesHere reports whether a lane of this process serving class c found
// its queue empty and waits: Notify makes it take at once, so a message of
// c enqueued by this process needs no other replica woken for it
// (queue.Checks.TakenHere).
func (d *Dispatcher) TakesHere(c sms.Class) bool {
	for _, ln := range d.lanes {
		if ln.serves(c) && ln.empty.Load() {
			return true
		}
	}
	return false
}

// readyToTake waits until a lane of this process found its queue empty
// (it would take at once if woken), or with fresh until a lane did so
// after the news no lane here could act on (wakeIfIdle); false when ctx
// ends first. The wake-up listener waits for news only then: a replica
// whose lanes are all busy leaves the news to an idle one.
func (d *Dispatcher) readyToTake(ctx context.Context, fresh bool) bool {
	for {
		if fresh {
			if d.emptyTakes.Load() > d.missedAt.Load() {
				return true
			}
		} else {
			for _, ln := range d.lanes {
				if ln.empty.Load() {
					return true
				}
			}
		}
		select {
		case <-d.laneEmpty:
		case <-ctx.Done():
			return false
		}
	}
}

// noteBusy records that this process is sending now.
// sinceEpoch is the time on the monotonic clock, as nanoseconds since the
// dispatcher's epoch.
func (d *Dispatcher) sinceEpoch() int64 { return int64(time.Since(d.epoch)) }

func (d *Dispatcher) noteBusy() { d.busyAt.Store(max(1, int64(time.Since(d.epoch)))) }

// Idle reports whether this process has held no message and begun no
// fast-path send for at least quiet. Loops that read shared state only a
// sender needs (the guard's count, the operator pause, the stats totals)
// read it less often while their replica is idle, so that an idle fleet
// costs Redis little; what a send must know is read again when sending
// starts.
func (d *Dispatcher) Idle(quiet time.Duration) bool {
	d.mu.Lock()
	n := len(d.flights)
	d.mu.Unlock()
	return n == 0 && time.Since(d.epoch)-time.Duration(d.busyAt.Load()) >= quiet
}

// noteQueueError records that the queue (Redis) just failed a call.
func (d *Dispatcher) noteQueueError() { d.queueErrAt.Store(max(1, int64(time.Since(d.epoch)))) }

// sinceQueueError is how long ago a queue call last failed; ok is false
// when none ever did.
func (d *Dispatcher) sinceQueueError() (time.Duration, bool) {
	at := d.queueErrAt.Load()
	if at == 0 {
		return 0, false
	}
	return time.Since(d.epoch) - time.Duration(at), true
}
