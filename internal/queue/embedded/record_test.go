package embedded

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"smsgw/internal/queue"
	"smsgw/internal/queue/queuetest"
	"smsgw/internal/sms"
)

// TestRecordKeepsEveryField: every field of sms.Message, set to a value of
// its own, and the bookkeeping survive toRecord, JSON and decodeEntry (times
// at ms). A field added to the domain type fails here until the record
// stores it.
func TestRecordKeepsEveryField(t *testing.T) {
	e := &entry{Seq: 7, Due: 8, Token: "tok", Lease: 9, Owner: "w", At: 10}
	queuetest.FillEveryField(t, &e.Msg)
	js, stored, err := encodeEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeEntry(e.Msg.ID, js)
	if err != nil {
		t.Fatalf("decodeEntry(%s): %v", js, err)
	}
	jw, _ := json.Marshal(e)
	jg, _ := json.Marshal(got)
	js2, _ := json.Marshal(stored)
	if string(jg) != string(jw) || string(js2) != string(jw) {
		t.Fatalf("through the record %s\n got %s\nwant %s", js, jg, jw)
	}
}

// legacyValue is a msgs value as earlier releases wrote it: the message as
// sms.Message JSON under "msg", the bookkeeping beside it.
func legacyValue(id string, c sms.Class, status string, attempts int, msgExtra string, seq uint64, due int64, extra string, created time.Time) []byte {
	iso := created.UTC().Format(time.RFC3339Nano)
	return fmt.Appendf(nil, `{"msg":{"id":"%s","producer":"p","class":"%s","to":"+819012345678","body":"hello",`+
		`"segments":1%s,"created_at":"%s","status":"%s","attempts":%d,"updated_at":"%s"},"seq":%d,"due":%d%s}`,
		id, c, msgExtra, iso, status, attempts, iso, seq, due, extra)
}

// seedLegacy stores four legacy records of producer p created at created,
// with their index entries and counters as earlier releases kept them: a
// (otp, queued, idempotency key k1) and b (otp, queued), c (transactional,
// leased until a second before the clock's now), d (marketing, a dead
// letter after 3 attempts).
func seedLegacy(t *testing.T, q *Queue, created time.Time) (a, b, c, d string) {
	t.Helper()
	due, at, lease := ms(created), ms(created), ms(q.now())-1000
	a, b, c, d = sms.NewID(created), sms.NewID(created), sms.NewID(created), sms.NewID(created)
	err := q.db.Update(func(tx *bolt.Tx) error {
		seed := func(id string, v []byte, index []byte, k []byte, kind byte, cl sms.Class, out int64) error {
			return errors.Join(tx.Bucket(bMsgs).Put([]byte(id), v), tx.Bucket(index).Put(k, []byte(id)),
				addClass(tx, cl, kind, 1), addOut(tx, "p", out))
		}
		return errors.Join(
			seed(a, legacyValue(a, sms.ClassOTP, "queued", 0, `,"idempotency_key":"k1"`, 1, due, "", created),
				bReady, readyKey(sms.ClassOTP, due, 1), kindQueued, sms.ClassOTP, 1),
			seed(b, legacyValue(b, sms.ClassOTP, "queued", 0, "", 2, due, "", created),
				bReady, readyKey(sms.ClassOTP, due, 2), kindQueued, sms.ClassOTP, 1),
			seed(c, legacyValue(c, sms.ClassTransactional, "sending", 0, "", 3, due,
				fmt.Sprintf(`,"token":"tok","lease":%d,"owner":"w"`, lease), created),
				bLeases, timeKey(lease, c), kindLeased, sms.ClassTransactional, 1),
			seed(d, legacyValue(d, sms.ClassMarketing, "failed", 3, `,"last_error":"gave up","dead":true`, 4, due,
				fmt.Sprintf(`,"at":%d`, at), created),
				bDead, timeKey(at, d), kindDead, sms.ClassMarketing, 0),
			tx.Bucket(bDone).Put(timeKey(at, d), nil),
			tx.Bucket(bIdem).Put(idemKey("p", "k1"), append(u64(at), a...)),
			tx.Bucket(bMsgs).SetSequence(4))
	})
	if err != nil {
		t.Fatal(err)
	}
	return a, b, c, d
}

// TestLegacyRecords: records an earlier release stored are read exactly,
// taken, requeued, completed, recovered, made dead letters and retried, an
// idempotent replay returns them, and each is a record once written.
func TestLegacyRecords(t *testing.T) {
	clk := newClock()
	q := open(t, Config{Now: clk.Now})
	ctx := t.Context()
	created := clk.Now().Add(-time.Hour + 123456789*time.Nanosecond)
	a, b, c, d := seedLegacy(t, q, created)
	checkInvariants(t, q)

	want := &sms.Message{ID: a, Producer: "p", Class: sms.ClassOTP, To: "+819012345678", Body: "hello", Segments: 1,
		IdempotencyKey: "k1", CreatedAt: created, Status: sms.StatusQueued, UpdatedAt: created}
	if got, err := q.Get(ctx, a); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Get of a legacy record = %+v, %v\nwant %+v", got, err, want)
	}
	replay := msg("p", sms.ClassOTP, clk.Now())
	replay.IdempotencyKey = "k1"
	if res, err := q.Enqueue(ctx, replay); err != nil || !res.Existed || !reflect.DeepEqual(res.Message, want) {
		t.Fatalf("replay of a legacy record's key = %+v, %v", res, err)
	}

	l, _, err := q.Take(ctx, queue.TakeOptions{Lease: time.Hour})
	if err != nil || l.Message.ID != a || !l.Message.CreatedAt.Equal(created.Truncate(time.Millisecond)) {
		t.Fatalf("Take = %+v, %v: want %s, created at %v to the ms", l, err, a, created)
	}
	if err := q.Requeue(ctx, l, queue.RequeueOptions{SpendAttempt: true, LastError: "503"}); err != nil {
		t.Fatal(err)
	}
	if m, err := q.Get(ctx, a); err != nil || m.Attempts != 1 || m.LastError != "503" || m.Status != sms.StatusQueued {
		t.Fatalf("after Requeue: %+v, %v", m, err)
	}
	if l, _, err = q.Take(ctx, queue.TakeOptions{Lease: time.Hour}); err != nil || l.Message.ID != b {
		t.Fatalf("Take = %+v, %v: want %s", l, err, b)
	}
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm", Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	if n, err := q.Recover(ctx); err != nil || n != 1 {
		t.Fatalf("Recover = %d, %v: want the legacy lease of %s", n, err, c)
	}
	dl, err := q.DeadLetters(ctx, 10)
	if err != nil || len(dl) != 1 || dl[0].ID != d || !dl[0].Dead || dl[0].Attempts != 3 || dl[0].LastError != "gave up" {
		t.Fatalf("DeadLetters = %+v, %v", dl, err)
	}
	if err := q.RetryDead(ctx, d); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, q)
	for _, id := range []string{a, c, d} {
		if m, err := q.Get(ctx, id); err != nil || m.Status != sms.StatusQueued || m.Attempts != map[string]int{a: 1}[id] {
			t.Fatalf("Get %s = %+v, %v: want queued", id, m, err)
		}
	}
	if m, err := q.Get(ctx, b); err != nil || m.Status != sms.StatusSent || m.ProviderID != "pm" || m.SentAt.IsZero() {
		t.Fatalf("Get %s = %+v, %v: want sent", b, m, err)
	}
	if n, err := q.Outstanding(ctx, "p"); err != nil || n != 3 {
		t.Fatalf("Outstanding = %d, %v: want 3", n, err)
	}
	err = q.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bFinal).Get(finalKey(b)); !queue.IsFinal(string(v)) || tx.Bucket(bMsgs).Get([]byte(b)) != nil {
			t.Errorf("%s is not a final record once completed: %q", b, v)
		}
		for _, id := range []string{a, c, d} {
			var v map[string]any
			if err := json.Unmarshal(tx.Bucket(bMsgs).Get([]byte(id)), &v); err != nil || v["s"] == nil || v["msg"] != nil {
				t.Errorf("%s is not a record once written: %v, %v", id, v, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

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
