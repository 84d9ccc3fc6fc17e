package embedded

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"smsgw/internal/queue"
	"smsgw/internal/queue/queuetest"
	"smsgw/internal/sms"
)

// sizeStart is the creation time of message 0.
var sizeStart = time.Now()

// sizeMsg is queuetest's typical message i at full pace.
func sizeMsg(i int) *sms.Message { return queuetest.SizeMessage(sizeStart, i, queuetest.FullPace) }

// storeSize is the file size and the bytes in use in the pages of the msgs
// bucket and of every bucket (bbolt's own page statistics).
type storeSize struct{ file, msgs, all int64 }

func measureStore(tb testing.TB, q *Queue) storeSize {
	tb.Helper()
	var s storeSize
	err := q.db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			st := b.Stats()
			inuse := int64(st.BranchInuse + st.LeafInuse + st.InlineBucketInuse)
			s.all += inuse
			if string(name) == string(bMsgs) {
				s.msgs = inuse
			}
			return nil
		})
	})
	if err != nil {
		tb.Fatal(err)
	}
	fi, err := os.Stat(q.db.Path())
	if err != nil {
		tb.Fatal(err)
	}
	s.file = fi.Size()
	return s
}

// BenchmarkStoredBytes reports what one message costs the bbolt file: bytes
// in use per message in the msgs bucket and in all buckets, and the file size
// per message, once queuetest.SizeMessages messages are queued, once all are sent
// (Take and Complete with a 34-character provider id) and once each has its
// delivery receipt (what a completed message costs for the retention), once
// as many keyed messages are each accepted and canceled at once (what a
// never-sent message keeps), and from that the growth of a 10-minute run at full pace. Run it once:
//
//	go test -run '^$' -bench StoredBytes -benchtime 1x ./internal/queue/embedded
func BenchmarkStoredBytes(b *testing.B) {
	var queued, sent, delivered, canceled storeSize
	for b.Loop() {
		q := open(b, Config{})
		queuetest.EnqueueAll(b, q, queuetest.SizeMessages, maxBatch, sizeMsg)
		queued = measureStore(b, q)
		ids := sendAll(b, q)
		sent = measureStore(b, q)
		for _, id := range ids {
			out, err := q.ApplyReceipt(b.Context(), queue.Receipt{Reference: id, Status: sms.StatusDelivered})
			if err != nil || out.Result != queue.ReceiptApplied {
				b.Fatalf("receipt for %s: %+v, %v", id, out, err)
			}
		}
		delivered = measureStore(b, q)

		// Accept-then-cancel, every message keyed as producers should
		// send: what a never-sent message keeps (its final record and its
		// key's mapping, for the retention and the idempotency window).
		c := open(b, Config{})
		for i := range queuetest.SizeMessages {
			m := sizeMsg(i)
			m.IdempotencyKey = fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
			m.RequestHash = fmt.Sprintf("%064x", i)
			if _, err := c.Enqueue(b.Context(), m); err != nil {
				b.Fatal(err)
			}
			if _, err := c.Cancel(b.Context(), m.ID, m.Producer); err != nil {
				b.Fatal(err)
			}
		}
		canceled = measureStore(b, c)
	}
	for _, m := range []struct {
		unit string
		v    int64
	}{
		{"msgs-B/queued-msg", queued.msgs}, {"all-B/queued-msg", queued.all}, {"file-B/queued-msg", queued.file},
		{"msgs-B/sent-msg", sent.msgs}, {"all-B/sent-msg", sent.all}, {"file-B/sent-msg", sent.file},
		{"all-B/delivered-msg", delivered.all},
		{"all-B/canceled-keyed-msg", canceled.all}, {"file-B/canceled-keyed-msg", canceled.file},
	} {
		b.ReportMetric(float64(m.v)/queuetest.SizeMessages, m.unit)
	}
	// A 10-minute run at full pace completes queuetest.TenMinutes messages; what the
	// store keeps of them is their final records (computed from the bytes
	// in use per delivered message; the file itself grows by pages and does
	// not shrink, see docs/operations.md).
	b.ReportMetric(float64(delivered.all)/queuetest.SizeMessages*queuetest.TenMinutes/1e6, "MB/10min-at-90/s")
}

// sendAll takes and completes every message with eight workers, so that
// commits are shared as in the send loop, and returns their ids.
func sendAll(b *testing.B, q *Queue) []string {
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		ids []string
	)
	for range 8 {
		wg.Go(func() {
			for {
				l, _, err := q.Take(b.Context(), queue.TakeOptions{Owner: "size", Lease: time.Minute})
				if errors.Is(err, queue.ErrEmpty) {
					return
				}
				if err != nil {
					b.Error(err)
					return
				}
				if err := q.Complete(b.Context(), l, queuetest.SentOutcome(l.Message.ID)); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				ids = append(ids, l.Message.ID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ids
}
