package redisq

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/queue/queuetest"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

// sizeStart is the creation time of message 0.
var sizeStart = time.Now()

// contractPace is the provider's contract, 100 messages a second: the
// pace of the opt-in hour run.
const contractPace = 100

// anHour is how many messages an hour at the contract's pace completes:
// enough to fill the provider-id index's HASHes of one hour as they fill
// in production.
const anHour = 3600 * contractPace

// sizeMsg is queuetest's typical message i at full pace.
func sizeMsg(i int) *sms.Message { return sizeMsgAt(i, queuetest.FullPace) }

// sizeMsgAt is queuetest's typical message i created at pace messages a
// second.
func sizeMsgAt(i, pace int) *sms.Message { return queuetest.SizeMessage(sizeStart, i, pace) }

// keyedMsg is sizeMsg(i) sent with an Idempotency-Key (a UUID's length):
// the queue then also maps the key to the message for the idempotency
// window.
func keyedMsg(i int) *sms.Message {
	m := sizeMsg(i)
	m.IdempotencyKey = fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
	m.RequestHash = fmt.Sprintf("%064x", sha256.Sum256([]byte(m.Body)))
	return m
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

// storedSize is what Redis holds at one step of BenchmarkStoredBytes:
// the growth of used_memory, and MEMORY USAGE (all samples) summed by kind
// of key.
type storedSize struct {
	used   int64
	byKind map[string]int64
}

// keyKinds names the kinds of key storedSize sums MEMORY USAGE over, by
// the part of the name after the queue's prefix; every other key is
// "other".
var keyKinds = []string{"fin:", "fz:", "px:", "pid:", "idem:"}

// BenchmarkStoredBytes reports what one message costs Redis, measured on a
// private redis-server (nothing else moves used_memory), with the scripts
// loaded before the first reading: n messages created at full pace are
// queued (B/queued-msg), then all sent (Take and Complete with a
// 34-character provider id, each its own: B/sent-msg), then each gets its
// delivery receipt (B/delivered-msg: what a completed message costs for
// the retention). final-B and pid-index-B split the delivered figure by
// MEMORY USAGE: the final records' lists, and the provider-id index
// (receipts without a reference). Then every second is compacted (as
// Compact does once a second has been quiet for CompactAfter):
// B/compacted-msg is what a completed message costs from then on, the
// steady state of the retention, and final-compacted-B the final records'
// part of it. n is queuetest.SizeMessages and a 10-minute run at
// full pace (queuetest.TenMinutes, whose delivered growth is the store's growth over
// those 10 minutes); the "keyed" run sends each message with an
// Idempotency-Key (its mapping to the message lives for the idempotency
// window: idem-B); the "hour-at-1/s" and "hour-at-10/s" runs are an hour
// at lower paces, where fewer records share each second's key and each
// hour's index HASHes. With SMSGW_STORED_HOUR=1 it also runs an hour at the
// contract's 100/s (anHour messages, ~10 minutes on a 2-core machine):
// the steady state of the provider-id index. Run it once:
//
//	go test -run '^$' -bench StoredBytes -benchtime 1x ./internal/queue/redisq
func BenchmarkStoredBytes(b *testing.B) {
	for _, run := range []struct {
		name string
		n    int
		msg  func(int) *sms.Message
	}{
		{fmt.Sprint(queuetest.SizeMessages), queuetest.SizeMessages, sizeMsg},
		{fmt.Sprint(queuetest.TenMinutes), queuetest.TenMinutes, sizeMsg},
		{fmt.Sprintf("%d-keyed", queuetest.SizeMessages), queuetest.SizeMessages, keyedMsg},
		// An hour at lower paces: fewer records share each second's key
		// (and its blob) and each hour's index HASHes.
		{"3600-hour-at-1/s", 3600, func(i int) *sms.Message { return sizeMsgAt(i, 1) }},
		{"36000-hour-at-10/s", 36000, func(i int) *sms.Message { return sizeMsgAt(i, 10) }},
		{fmt.Sprintf("%d-hour-at-100/s", anHour), anHour, func(i int) *sms.Message { return sizeMsgAt(i, contractPace) }},
	} {
		b.Run(run.name, func(b *testing.B) {
			if run.n == anHour && os.Getenv("SMSGW_STORED_HOUR") != "1" {
				b.Skip("an hour at 100/s: set SMSGW_STORED_HOUR=1")
			}
			srv := redistest.StartServer(b, redistest.ServerOptions{})
			c := newClient(b, srv.Addr)
			var steps [4]storedSize
			for b.Loop() {
				steps = storedBytes(b, c, run.n, run.msg)
			}
			per := func(v int64) float64 { return float64(v) / float64(run.n) }
			queued, sent, delivered, compacted := steps[0], steps[1], steps[2], steps[3]
			b.ReportMetric(per(queued.used), "B/queued-msg")
			b.ReportMetric(per(sent.used), "B/sent-msg")
			b.ReportMetric(per(delivered.used), "B/delivered-msg")
			b.ReportMetric(per(delivered.byKind["fin:"]+delivered.byKind["fz:"]), "final-B/msg")
			b.ReportMetric(per(delivered.byKind["px:"]+delivered.byKind["pid:"]), "pid-index-B/msg")
			b.ReportMetric(per(compacted.used), "B/compacted-msg")
			b.ReportMetric(per(compacted.byKind["fin:"]+compacted.byKind["fz:"]), "final-compacted-B/msg")
			if run.msg(0).IdempotencyKey != "" {
				b.ReportMetric(per(delivered.byKind["idem:"]), "idem-B/msg")
			}
			switch run.n {
			case queuetest.TenMinutes:
				b.ReportMetric(float64(delivered.used)/1e6, "MB/10min-at-90/s")
			case anHour:
				b.ReportMetric(float64(delivered.used)/1e6, "MB/hour-at-100/s")
				// A day at 100/s: all compacted but the last CompactAfter.
				recent := DefaultCompactAfter.Seconds() * contractPace
				day := (86400*contractPace-recent)*per(compacted.used) + recent*per(delivered.used)
				b.ReportMetric(day/1e6, "MB/24h-at-100/s")
			}
		})
	}
}

// storedBytes stores n messages made by msg, sends them all, then applies
// a delivery receipt to each, then compacts every second, and returns what
// Redis holds after each step.
func storedBytes(b *testing.B, c *redis.Client, n int, msg func(int) *sms.Message) [4]storedSize {
	ctx := context.Background()
	// Every script loaded before the first reading (Redis keeps them).
	warm := openCompactingNow(b, c, "warm")
	first := sizeMsg(0)
	enqueue(b, warm, first)
	deliver(b, warm)
	compactNow(b, warm)
	if _, err := warm.ApplyReceipt(ctx, queue.Receipt{ProviderID: "pm", Status: sms.StatusDelivered}); err != nil {
		b.Fatal(err)
	}
	if _, err := warm.Get(ctx, first.ID); err != nil {
		b.Fatal(err)
	}
	if err := c.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	q := openCompactingNow(b, c, "size")
	base := usedMemory(b, c)
	measure := func() storedSize { return storedSize{used: usedMemory(b, c) - base, byKind: memoryByKind(b, c, q)} }
	var out [4]storedSize
	queuetest.EnqueueAll(b, q, n, maxBatch, msg)
	out[0] = measure()
	ids := make([]string, 0, n)
	for range n {
		l, _, err := q.Take(ctx, queue.TakeOptions{Owner: "size", Lease: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if err := q.Complete(ctx, l, queuetest.SentOutcome(l.Message.ID)); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, l.Message.ID)
	}
	out[1] = measure()
	for _, id := range ids {
		out, err := q.ApplyReceipt(ctx, queue.Receipt{Reference: id, Status: sms.StatusDelivered})
		if err != nil || out.Result != queue.ReceiptApplied {
			b.Fatalf("receipt for %s: %+v, %v", id, out, err)
		}
	}
	out[2] = measure()
	compactNow(b, q)
	out[3] = measure()
	return out
}

// openCompactingNow is open with a CompactAfter so short that every
// second is due for compaction at once.
func openCompactingNow(b *testing.B, c *redis.Client, account string) *Queue {
	q, err := New(Config{Client: c, Account: account, Logger: testLogger(b), CompactAfter: time.Nanosecond})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = q.Close() })
	return q
}

// memoryByKind sums MEMORY USAGE (every element sampled) of q's keys by
// kind (keyKinds, else "other").
func memoryByKind(b *testing.B, c *redis.Client, q *Queue) map[string]int64 {
	ctx := context.Background()
	out := map[string]int64{}
	iter := c.Scan(ctx, 0, q.k.tag+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		n, err := c.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			b.Fatalf("MEMORY USAGE %s: %v", k, err)
		}
		kind := "other"
		for _, p := range keyKinds {
			if strings.HasPrefix(k, q.k.tag+p) {
				kind = p
			}
		}
		out[kind] += n
	}
	if err := iter.Err(); err != nil {
		b.Fatal(err)
	}
	return out
}
