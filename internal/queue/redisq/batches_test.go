package redisq

import (
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
)

// A batch's LIST expires the retention after the last time its latest
// message can still be queued (queue.BatchKeep), and a later message of the
// batch only lengthens it: the index outlives every message it names.
func TestBatchIndexExpiry(t *testing.T) {
	q := newWith(t, Config{Retention: time.Hour})
	ctx := t.Context()
	batch := sms.NewBatchID(time.Now())
	late, early := smstest.Message("p", sms.ClassMarketing), smstest.Message("p", sms.ClassMarketing)
	late.BatchID, early.BatchID = batch, batch
	late.ExpiresAt = time.Now().Add(3 * time.Hour)
	early.ExpiresAt = time.Now().Add(time.Hour)
	ttl := func() time.Duration {
		d, err := q.c.PTTL(ctx, q.k.batch("p", batch)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if _, err := q.EnqueueMany(ctx, []*sms.Message{late}); err != nil {
		t.Fatal(err)
	}
	if d := ttl(); d < 4*time.Hour-time.Minute || d > 4*time.Hour {
		t.Fatalf("batch LIST expires in %v, want 4 h (expiry 3 h + retention 1 h)", d)
	}
	if _, err := q.EnqueueMany(ctx, []*sms.Message{early}); err != nil {
		t.Fatal(err)
	}
	if d := ttl(); d < 4*time.Hour-time.Minute {
		t.Fatalf("a message of an earlier end shortened the batch LIST to %v", d)
	}
	plain := smstest.Message("p", sms.ClassMarketing)
	if _, err := q.Enqueue(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if got, err := q.BatchMessages(ctx, "p", batch); err != nil || len(got) != 2 {
		t.Fatalf("BatchMessages = %v, %v; want the 2 messages of the batch", got, err)
	}
	if keep := queue.BatchKeep(plain, time.Now(), time.Hour); keep < time.Hour {
		t.Fatalf("BatchKeep of a message without expiry = %v, want at least the retention", keep)
	}
}
