package queuetest

import (
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// TakeBehindHeldSender is the body of each backend's
// BenchmarkTakeBehindSlowSender: backlog marketing messages of a 1/s
// sender whose lane is held (as the send loop holds it when the sender's
// limit refuses a reservation), then, per op, one message of another
// sender of the same class: an op is the Take that hands it out (the
// enqueue and the Complete are not timed). Its cost must not grow with
// the backlog.
func TakeBehindHeldSender(b *testing.B, q queue.Queue, backlog int) {
	ctx := b.Context()
	for n := backlog; n > 0; {
		batch := make([]*sms.Message, min(n, 1000))
		for i := range batch {
			batch[i] = fromMsg(slowSender, sms.ClassMarketing)
		}
		if _, err := q.EnqueueMany(ctx, batch); err != nil {
			b.Fatal(err)
		}
		n -= len(batch)
	}
	lh, ok := q.(queue.LaneHolder)
	if !ok {
		b.Fatalf("%T does not hold lanes", q)
	}
	if err := lh.HoldLane(ctx, slowSender, time.Hour); err != nil {
		b.Fatal(err)
	}
	o := queue.TakeOptions{Owner: "bench", Lease: time.Minute}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		m := fromMsg(otherSender, sms.ClassMarketing)
		if _, err := q.Enqueue(ctx, m); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		l, _, err := q.Take(ctx, o)
		b.StopTimer()
		if err != nil || l.Message.ID != m.ID {
			b.Fatalf("Take = %v, %v: want the other sender's message", l, err)
		}
		if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, Attempts: 1}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
