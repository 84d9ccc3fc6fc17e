package redisq

import (
	"context"
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

// sizeMsg is a typical transactional message: a 110-character body, an
// E.164 number, a producer's reference, no idempotency key.
func sizeMsg(i int) *sms.Message {
	now := time.Now()
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
// used_memory over sizeMessages messages, once queued and once all are sent
// (Take and Complete with a 34-character provider id). It runs on a private
// redis-server so that nothing else moves used_memory, and loads the scripts
// before the first reading. Run it once:
//
//	go test -run '^$' -bench StoredBytes -benchtime 1x ./internal/queue/redisq
func BenchmarkStoredBytes(b *testing.B) {
	srv := redistest.StartServer(b, redistest.ServerOptions{})
	c := newClient(b, srv.Addr)
	ctx := context.Background()
	var queued, done int64
	for b.Loop() {
		warm := open(b, c, "warm")
		enqueue(b, warm, sizeMsg(0))
		deliver(b, warm)
		if err := c.FlushAll(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		q := open(b, c, "size")
		base := usedMemory(b, c)
		batch := make([]*sms.Message, 0, maxBatch)
		for i := range sizeMessages {
			batch = append(batch, sizeMsg(i))
			if len(batch) == maxBatch || i == sizeMessages-1 {
				if _, err := q.EnqueueMany(ctx, batch); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
		queued = usedMemory(b, c) - base
		for range sizeMessages {
			l, _, err := q.Take(ctx, queue.TakeOptions{Owner: "size", Lease: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			o := queue.Outcome{Status: sms.StatusSent, ProviderID: "SM0123456789abcdef0123456789abcdef", Attempts: 1}
			if err := q.Complete(ctx, l, o); err != nil {
				b.Fatal(err)
			}
		}
		done = usedMemory(b, c) - base
	}
	b.ReportMetric(float64(queued)/sizeMessages, "B/queued-msg")
	b.ReportMetric(float64(done)/sizeMessages, "B/sent-msg")
}
