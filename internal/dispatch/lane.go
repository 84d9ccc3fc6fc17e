package dispatch

// A lane is a pacer and its senders (see doc.go): the pacer takes, batches
// and reserves; each sender sleeps the reserved delay and runs the rest of
// the send path (take.go, reserve.go, send.go, record.go).

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

const (
	laneOTP  = "otp"
	laneBulk = "bulk"
)

// takeErrorBackoff bounds how fast a pacer retries a failing queue.
const (
	takeErrorBackoffMin = 50 * time.Millisecond
	takeErrorBackoffMax = 2 * time.Second
)

// lane is one pacer and its senders.
type lane struct {
	name    string
	classes []sms.Class
	slots   chan struct{} // one token per free sender
	poll    time.Duration
	wake    chan struct{}
	// blocked holds classes the limiter told us to leave alone until a
	// time; only the pacer reads and writes it.
	blocked   map[sms.Class]time.Time
	errStreak int // consecutive take errors; pacer only
	// empty: the lane's last take found nothing and it waits for a
	// wake-up or its poll (TakesHere).
	empty atomic.Bool
	// due is when the first message this lane put back with a delay (a
	// retry's backoff) is ready again, UnixNano (0: none). The queue
	// announces messages that are ready, not delayed ones that become so:
	// an empty take idles until then at most, not for the whole poll (5 s
	// with a shared queue).
	due atomic.Int64
}

// dueAt notes that a message this lane put back is ready at t; when that
// is sooner than any it knew of, it wakes the lane, which may be idling
// for its whole poll, to idle until t instead.
func (ln *lane) dueAt(t time.Time) {
	n := t.UnixNano()
	for {
		cur := ln.due.Load()
		if cur != 0 && cur <= n {
			return
		}
		if ln.due.CompareAndSwap(cur, n) {
			select {
			case ln.wake <- struct{}{}:
			default:
			}
			return
		}
	}
}

// dueIn is how long until the first message this lane put back is ready
// again; false when none is waiting (a time passed is forgotten: the take
// that follows finds the message, or the queue's own wait says when).
func (ln *lane) dueIn(now time.Time) (time.Duration, bool) {
	cur := ln.due.Load()
	if cur == 0 {
		return 0, false
	}
	if d := time.Duration(cur - now.UnixNano()); d > 0 {
		return d, true
	}
	ln.due.CompareAndSwap(cur, 0)
	return 0, false
}

func newLane(name string, classes []sms.Class, workers int, poll time.Duration) *lane {
	ln := &lane{name: name, classes: classes, slots: make(chan struct{}, workers), poll: poll,
		wake: make(chan struct{}, 1), blocked: make(map[sms.Class]time.Time)}
	for range workers {
		ln.slots <- struct{}{}
	}
	return ln
}

func (ln *lane) serves(c sms.Class) bool {
	for _, x := range ln.classes {
		if x == c {
			return true
		}
	}
	return false
}

func (ln *lane) release() { ln.slots <- struct{}{} }

// ready returns the classes that may be taken now, in priority order, and
// when none may: how long until the first one may.
func (ln *lane) ready(now time.Time) ([]sms.Class, time.Duration) {
	out := make([]sms.Class, 0, len(ln.classes))
	var next time.Duration
	for _, c := range ln.classes {
		until, ok := ln.blocked[c]
		if !ok || !until.After(now) {
			delete(ln.blocked, c)
			out = append(out, c)
			continue
		}
		if w := until.Sub(now); next == 0 || w < next {
			next = w
		}
	}
	return out, next
}

func (ln *lane) block(c sms.Class, until time.Time) {
	if until.After(ln.blocked[c]) {
		ln.blocked[c] = until
	}
}

// pace is the pacer of one lane: the only goroutine of the lane that calls
// Take and Reserve. It returns when Stop (or a crash) ends takeCtx.
func (d *Dispatcher) pace(ln *lane) {
	ctx := d.takeCtx
	defer ln.empty.Store(false) // a stopped lane takes nothing
	for {
		select { // a free sender first: never hold a lease nobody can send
		case <-ln.slots:
		case <-ctx.Done():
			return
		}
		if idle := d.paceOne(ctx, ln); idle > 0 {
			d.idle(ctx, ln, idle)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// paceOne moves a message, or a batch of one class, from the queue to
// senders. It holds one sender slot per message it takes and hands each on
// with its message or gives it back. It returns how long the lane should
// idle before trying again.
func (d *Dispatcher) paceOne(ctx context.Context, ln *lane) time.Duration {
	held := 1 // the slot pace acquired
	defer func() {
		for range held {
			ln.release()
		}
	}()
	if left := d.pauseLeft(); left > 0 {
		return left // this process saw a 429 or a pause: ask nobody until it ends
	}
	if d.breaker.State() == gobreaker.StateOpen {
		return max(d.cfg.BreakerOpen/10, 10*time.Millisecond)
	}
	classes, next := ln.ready(time.Now())
	if len(classes) == 0 {
		return next
	}
	if classes = d.unheld(ctx, classes); len(classes) == 0 {
		return heldRetry
	}
	ln.empty.Store(false)
	f, wait, err := d.take(ctx, ln, classes)
	switch {
	case errors.Is(err, queue.ErrEmpty):
		if ctx.Err() == nil {
			ln.empty.Store(true)
			d.emptyTakes.Add(1)
			select {
			case d.laneEmpty <- struct{}{}:
			default:
			}
		}
		ln.errStreak = 0
		idle := ln.poll
		if wait > 0 && wait < idle {
			idle = wait
		}
		if d, ok := ln.dueIn(time.Now()); ok && d < idle {
			idle = d
		}
		return idle
	case err != nil:
		ln.errStreak++
		return min(takeErrorBackoffMin<<min(ln.errStreak-1, 10), takeErrorBackoffMax)
	}
	ln.errStreak = 0
	if d.gone(f) {
		return 0
	}
	// Each sender's run of the batch is reserved on its own: a sender's
	// limit or pause holds back that sender's messages only.
	for _, batch := range bySender(d.fill(ctx, ln, f, &held)) {
		sl, res := slot{}, reserveSplit
		if !d.senderLimited(batch) {
			sl, res = d.reserve(ctx, batch)
		}
		switch res {
		case reserveOK:
			d.handOff(batch, sl, &held)
		case reserveSplit:
			for _, f := range batch {
				if sl, res := d.reserve(ctx, []*flight{f}); res == reserveOK {
					d.handOff([]*flight{f}, sl, &held)
				}
			}
		}
	}
	return 0
}

// handOff starts a sender per message; each takes one of the held slots.
// In a batch the first send goes alone and the others follow its answer
// (see batchGate).
func (d *Dispatcher) handOff(batch []*flight, sl slot, held *int) {
	var gate *batchGate
	if len(batch) > 1 {
		gate = &batchGate{done: make(chan struct{})}
	}
	for i, f := range batch {
		*held--
		d.senders.Add(1)
		go d.sendOne(f, sl, gate, i == 0)
	}
}

// batchProbeWait bounds how long the rest of a batch waits for the answer
// to its first send. A provider that answers within it never sees more than
// one 429 from this process per throttle; a slower one is no worse off than
// without batching (its sends overlap anyway).
const batchProbeWait = 20 * time.Millisecond

// batchGate holds the followers of a batch until the leader's send is
// answered (or given up), so that a 429 to the leader pauses this process
// before the followers send.
type batchGate struct {
	once sync.Once
	done chan struct{}
}

func (g *batchGate) open() {
	if g != nil {
		g.once.Do(func() { close(g.done) })
	}
}

func (g *batchGate) wait(ctx context.Context) {
	if g == nil {
		return
	}
	t := time.NewTimer(batchProbeWait)
	defer t.Stop()
	select {
	case <-g.done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// fill takes more messages of first's class to reserve with it, while a
// sender is free and the batch costs less than BulkBatch units (OTP is
// never batched: each OTP goes as soon as it has a slot).
func (d *Dispatcher) fill(ctx context.Context, ln *lane, first *flight, held *int) []*flight {
	batch := []*flight{first}
	class := first.l.Message.Class
	if class == sms.ClassOTP {
		return batch
	}
	// While the guard multiplies costs, batches shrink so that the
	// multiplied cost still fits the burst.
	limit := max(d.cfg.BulkBatch/int(d.slowdown.Load()), 1)
	if c := d.batchCap.get(classIndex(class)); c > 0 {
		limit = min(limit, c)
	}
	cost := d.cost(first.l.Message)
	// One call takes the rest of the batch: as many as there are free
	// senders, while the units stay under the limit.
	free := 0
	for free < limit-cost {
		select {
		case <-ln.slots:
			free++
			continue
		default:
		}
		break
	}
	*held += free
	if free == 0 {
		return batch
	}
	units := limit - cost
	if !d.cfg.CountSegments {
		units = 1 << 30 // every message costs one unit: most alone bounds the batch
	}
	ls, err := d.takeMore(ctx, ln, class, free, units)
	if err != nil {
		return batch
	}
	for _, f := range ls {
		if !d.gone(f) {
			batch = append(batch, f)
		}
	}
	return batch
}

// idle waits d, or less when Notify wakes the lane or the pacer must stop.
func (d *Dispatcher) idle(ctx context.Context, ln *lane, wait time.Duration) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ln.wake:
	case <-ctx.Done():
	}
}

// heldRetry is how soon a lane whose every class an operator holds asks
// again; it bounds how long sending lags behind a resume on this replica.
const heldRetry = 250 * time.Millisecond

// unheld is classes without those an operator's class pause holds: their
// messages stay in the queue, untouched, while the others flow.
func (d *Dispatcher) unheld(ctx context.Context, classes []sms.Class) []sms.Class {
	if d.cfg.Held == nil {
		return classes
	}
	out := classes[:0]
	for _, c := range classes {
		if !d.cfg.Held.ClassHeld(ctx, c) {
			out = append(out, c)
		}
	}
	return out
}
