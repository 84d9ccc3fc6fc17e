package redisq

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/queue/redisq/lanes"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
)

// TestLanesReadQueuedBeforeLanes: a message of a sender that an earlier
// release queued in the class's one ready ZSET is still taken, canceled,
// and held with its lane once it went back through the queue.
func TestLanesReadQueuedBeforeLanes(t *testing.T) {
	q := newShared(t)
	ctx := t.Context()
	var ms []*sms.Message
	for range 3 {
		m := smstest.Message("p", sms.ClassMarketing)
		m.From = "+15550000009"
		ms = append(ms, m)
	}
	if _, err := q.EnqueueMany(ctx, ms); err != nil {
		t.Fatal(err)
	}
	// as an earlier release left them: in ready:<class>, no lane index
	ready := q.k.ready(sms.ClassMarketing)
	lane := ready + ":" + lanes.Tag("+15550000009")
	zs, err := q.c.ZRangeWithScores(ctx, lane, 0, -1).Result()
	if err != nil || len(zs) != 3 {
		t.Fatalf("lane ZSET %v, %v: want the 3 messages", zs, err)
	}
	pipe := q.c.TxPipeline()
	pipe.Del(ctx, lane, ready+":lanes")
	for _, z := range zs {
		pipe.ZAdd(ctx, ready, redis.Z{Score: z.Score, Member: z.Member})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Cancel(ctx, ms[2].ID, "p"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	l, _, err := q.Take(ctx, queue.TakeOptions{Owner: "o", Lease: time.Hour})
	if err != nil || l.Message.ID != ms[0].ID {
		t.Fatalf("Take = %v, %v: want the first message queued before lanes", l, err)
	}
	if err := q.Requeue(ctx, l, queue.RequeueOptions{KeepPlace: true}); err != nil {
		t.Fatal(err)
	}
	if err := q.HoldLane(ctx, "+15550000009", time.Hour); err != nil {
		t.Fatal(err)
	}
	// the put-back message is in its lane now, held; the other is still
	// in the default lane, not held
	l, _, err = q.Take(ctx, queue.TakeOptions{Owner: "o", Lease: time.Hour})
	if err != nil || l.Message.ID != ms[1].ID {
		t.Fatalf("Take = %v, %v: want the second message, still in the default lane", l, err)
	}
	if _, _, err := q.Take(ctx, queue.TakeOptions{Owner: "o", Lease: time.Hour}); !errors.Is(err, queue.ErrEmpty) {
		t.Fatalf("Take: %v, want ErrEmpty with the first message held in its lane", err)
	}
	if n, _ := q.c.ZCard(ctx, ready).Result(); n != 0 {
		t.Fatalf("%d members left in the default lane, want 0 (the canceled one removed)", n)
	}
}
