package redisq

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

// sizeMessages is how many messages BenchmarkStoredBytes stores.
const sizeMessages = 5000

// fullPace is the rate the stored messages are created at: the default
// target_rps, the most the gateway sends. It spreads their ids' creation
// times as a real run at full pace would (redisq groups final records by
// creation second).
const fullPace = 90

// tenMinutes is how many messages a 10-minute run at full pace completes.
const tenMinutes = 600 * fullPace

// sizeStart is the creation time of message 0.
var sizeStart = time.Now()

// sizeMsg is a typical transactional message: a 110-character body, an
// E.164 number, a producer's reference, no idempotency key; message i is
// created i/fullPace seconds after message 0.
func sizeMsg(i int) *sms.Message {
	now := sizeStart.Add(time.Duration(i) * time.Second / fullPace)
	body := fmt.Sprintf("Your order %08d has shipped and will arrive tomorrow between 9:00 and 12:00. Track it in the app or reply STOP.", i)
	return &sms.Message{
		ID: sms.NewID(now), Producer: "shop-backend", Class: sms.ClassTransactional,
		To: "+819012345678", Body: body[:110], Reference: fmt.Sprintf("order-%08d", i),
		Segments: 1, CreatedAt: now.UTC(),
	}
}

// usedMemory is INFO memory's used_memory: the bytes Redis has allocated.
func usedMemory(tb testing.TB, c *redis.Client) int64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		tb.Fatalf("INFO memory: %v", err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatalf("used_memory %q: %v", v, err)
			}
			return n
		}
	}
	tb.Fatal("INFO memory has no used_memory")
	return 0
}

// BenchmarkStoredBytes reports what one message costs Redis: the growth of
// used_memory over n messages created at full pace, once queued and once
// all are sent (Take and Complete with a 34-character provider id), for n =
// sizeMessages and for a 10-minute run at full pace (tenMinutes messages,
// whose final records are all the store keeps of that run: its growth). It
// runs on a private redis-server so that nothing else moves used_memory,
// and loads the scripts before the first reading. Run it once:
//
//	go test -run '^$' -bench StoredBytes -benchtime 1x ./internal/queue/redisq
func BenchmarkStoredBytes(b *testing.B) {
	for _, n := range []int{sizeMessages, tenMinutes} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			srv := redistest.StartServer(b, redistest.ServerOptions{})
			c := newClient(b, srv.Addr)
			var queued, done int64
			for b.Loop() {
				queued, done = storedBytes(b, c, n)
			}
			b.ReportMetric(float64(queued)/float64(n), "B/queued-msg")
			b.ReportMetric(float64(done)/float64(n), "B/sent-msg")
			if n == tenMinutes {
				b.ReportMetric(float64(done)/1e6, "MB/10min-at-90/s")
			}
		})
	}
}

// storedBytes stores n messages, then sends them all, and returns the
// growth of used_memory after each step.
func storedBytes(b *testing.B, c *redis.Client, n int) (queued, done int64) {
	ctx := context.Background()
	warm := open(b, c, "warm")
	enqueue(b, warm, sizeMsg(0))
	deliver(b, warm)
	if err := c.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	q := open(b, c, "size")
	base := usedMemory(b, c)
	batch := make([]*sms.Message, 0, maxBatch)
	for i := range n {
		batch = append(batch, sizeMsg(i))
		if len(batch) == maxBatch || i == n-1 {
			if _, err := q.EnqueueMany(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	queued = usedMemory(b, c) - base
	for range n {
		l, _, err := q.Take(ctx, queue.TakeOptions{Owner: "size", Lease: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		// A Twilio-like id of 34 characters, each its own (receipts index it).
		o := queue.Outcome{Status: sms.StatusSent, ProviderID: fmt.Sprintf("SM%032x", sha256.Sum256([]byte(l.Message.ID)))[:34], Attempts: 1}
		if err := q.Complete(ctx, l, o); err != nil {
			b.Fatal(err)
		}
	}
	return queued, usedMemory(b, c) - base
}
