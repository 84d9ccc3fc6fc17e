package admission

import (
	"context"
	"fmt"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// Enqueuer stores one message (the queue, or a coalescer in front of it).
type Enqueuer interface {
	Enqueue(ctx context.Context, m *sms.Message) (queue.EnqueueResult, error)
}

// Coalescer turns concurrent single enqueues into EnqueueMany calls: one
// goroutine takes whatever requests are waiting (up to coalesceMax) and
// stores them with one call, so with Redis many POSTs share one script
// round trip. Nothing waits for a timer: under light load a batch is one
// message; under heavy load batches grow while the previous call runs. The
// goroutine runs from Start to Stop (it is one of the App's loops).
type Coalescer struct {
	q       queue.CheckedEnqueuer
	in      chan *enqueueCall
	timeout time.Duration

	base context.Context // Start's, values only, never cancelled
	done chan struct{}   // nil before Start
}

type enqueueCall struct {
	c   queue.Checked
	out chan enqueueReply
}

type enqueueReply struct {
	res queue.CheckedResult
	err error
}

const (
	coalesceMax     = 256
	coalesceTimeout = 5 * time.Second
)

// NewCoalescer starts nothing: Start runs its flush loop in front of q.
func NewCoalescer(q queue.CheckedEnqueuer) *Coalescer {
	return &Coalescer{q: q, in: make(chan *enqueueCall, coalesceMax), timeout: coalesceTimeout}
}

// Start starts the batch loop. Requests reach Enqueue only once the App
// serves HTTP, after Start.
func (c *Coalescer) Start(ctx context.Context) {
	c.base, c.done = context.WithoutCancel(ctx), make(chan struct{})
	go c.run()
}

// Enqueue stores m with no checks; see EnqueueChecked.
func (c *Coalescer) Enqueue(ctx context.Context, m *sms.Message) (queue.EnqueueResult, error) {
	res, err := c.EnqueueChecked(ctx, queue.Checked{Message: m})
	return res.EnqueueResult, err
}

// EnqueueChecked hands ch to the batch loop and waits for its result. A
// caller that gives up (ctx done) may still have its message stored, as
// with any enqueue cut short; an idempotency key makes the retry safe.
func (c *Coalescer) EnqueueChecked(ctx context.Context, ch queue.Checked) (queue.CheckedResult, error) {
	call := &enqueueCall{c: ch, out: make(chan enqueueReply, 1)}
	select {
	case c.in <- call:
	case <-ctx.Done():
		return queue.CheckedResult{}, ctx.Err()
	}
	select {
	case r := <-call.out:
		return r.res, r.err
	case <-ctx.Done():
		return queue.CheckedResult{}, ctx.Err()
	}
}

func (c *Coalescer) run() {
	defer close(c.done)
	batch := make([]*enqueueCall, 0, coalesceMax)
	for first := range c.in {
		batch = append(batch[:0], first)
	drain:
		for len(batch) < coalesceMax {
			select {
			case call, ok := <-c.in:
				if !ok {
					break drain
				}
				batch = append(batch, call)
			default:
				break drain
			}
		}
		c.flush(batch)
	}
}

// flush stores one batch. Its context is its own: one caller giving up
// must not fail the others.
func (c *Coalescer) flush(batch []*enqueueCall) {
	cs := make([]queue.Checked, len(batch))
	for i, call := range batch {
		cs[i] = call.c
	}
	ctx, cancel := context.WithTimeout(c.base, c.timeout)
	defer cancel()
	results, err := c.q.EnqueueChecked(ctx, cs)
	if err == nil && len(results) != len(batch) {
		err = fmt.Errorf("enqueue: %d results for %d messages", len(results), len(batch))
	}
	for i, call := range batch {
		switch {
		case err != nil:
			call.out <- enqueueReply{err: err}
		case results[i].Err != nil:
			call.out <- enqueueReply{res: results[i], err: results[i].Err}
		default:
			call.out <- enqueueReply{res: results[i]}
		}
	}
}

// Stop ends the loop once every accepted call is answered. Callers must
// have stopped calling Enqueue (the HTTP server has drained).
func (c *Coalescer) Stop() {
	if c.done == nil {
		return
	}
	close(c.in)
	<-c.done
	c.done = nil
}
