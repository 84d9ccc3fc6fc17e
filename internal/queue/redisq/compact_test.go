package redisq

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/queue/queuetest"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
)

// newCompacting is newShared with a CompactAfter so short that a second
// is due for compaction as soon as it is written.
func newCompacting(t testing.TB, cfg Config) *Queue {
	t.Helper()
	cfg.CompactAfter = time.Nanosecond
	return newWith(t, cfg)
}

// compactNow compacts every due second of q and returns how many.
func compactNow(t testing.TB, q *Queue) int {
	t.Helper()
	total := 0
	for {
		n, err := q.Compact(context.Background(), 100)
		if err != nil {
			t.Fatalf("Compact: %v", err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
}

// compactOne compacts every second of q that is due and fails unless that
// is exactly one.
func compactOne(t testing.TB, q *Queue) {
	t.Helper()
	if n := compactNow(t, q); n != 1 {
		t.Fatalf("compacted %d seconds, want 1", n)
	}
}

// sameSecond returns n messages of producer "p" created in this second,
// with callbacks.
func sameSecond(n int) []*sms.Message { return sameSecondAt(time.Now().Truncate(time.Second), n) }

// sameSecondAt returns n messages of producer "p" created in the second
// that starts at base, with callbacks.
func sameSecondAt(base time.Time, n int) []*sms.Message {
	out := make([]*sms.Message, n)
	for i := range out {
		out[i] = smstest.MessageAt("p", sms.ClassTransactional, base.Add(time.Duration(i)*time.Millisecond))
		out[i].Callbacks = true
	}
	return out
}

// send stores m, takes it and completes it as sent with provider id pid.
func send(t testing.TB, q *Queue, m *sms.Message, pid string) {
	t.Helper()
	enqueue(t, q, m)
	l := take(t, q, time.Hour)
	if l.Message.ID != m.ID {
		t.Fatalf("took %s, want %s", l.Message.ID, m.ID)
	}
	if err := q.Complete(context.Background(), l, queue.Outcome{Status: sms.StatusSent, ProviderID: pid, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
}

// mergedBlob merges els into blob as a compaction does and returns the
// entries and the new blob.
func mergedBlob(t testing.TB, blob string, els []string) ([]blobEntry, string) {
	t.Helper()
	entries, err := mergeBlob(blob, els)
	if err != nil {
		t.Fatal(err)
	}
	out, err := encodeBlob(entries)
	if err != nil {
		t.Fatal(err)
	}
	return entries, out
}

func mustGet(t testing.TB, q *Queue, id string) *sms.Message {
	t.Helper()
	m, err := q.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get %s: %v", id, err)
	}
	return m
}

// secondOf is the creation second of id.
func secondOf(t testing.TB, id string) int64 {
	t.Helper()
	at, ok := sms.IDTime(id)
	if !ok {
		t.Fatalf("id %q", id)
	}
	return at.Unix()
}

// TestCompactedRecordsRead: a compacted second is one STRING (its LIST and
// its compaction entry gone, expiring with the retention, smaller than the
// LIST's elements) from which Get reads every record as it was, a
// retried enqueue of an id finds it, a keyed replay finds the first
// message, and Cancel reports it final.
func TestCompactedRecordsRead(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newCompacting(t, Config{})
	ms := sameSecond(3)
	ms[0].IdempotencyKey, ms[0].RequestHash = "key-1", strings.Repeat("ab", 32)
	ms[1].From, ms[1].CallbackURL = "SHOP", "https://example.com/cb"
	send(t, q, ms[0], "SMaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	send(t, q, ms[1], "SMbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
	enqueue(t, q, ms[2])
	l := take(t, q, time.Hour)
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusFailed, Reason: "rejected", Attempts: 2}); err != nil {
		t.Fatal(err)
	}
	sec := secondOf(t, ms[0].ID)
	before := map[string]*sms.Message{}
	for _, m := range ms {
		before[m.ID] = mustGet(t, q, m.ID)
	}
	listBytes := 0
	for _, el := range q.c.LRange(ctx, q.k.finAt(sec), 0, -1).Val() {
		listBytes += len(el)
	}

	compactOne(t, q)
	if q.c.Exists(ctx, q.k.finAt(sec)).Val() != 0 || q.c.ZCard(ctx, q.k.finDue()).Val() != 0 {
		t.Fatal("the LIST or its compaction entry is still there")
	}
	blob := q.c.Get(ctx, q.k.finBlob(sec)).Val()
	if ttl := q.c.PTTL(ctx, q.k.finBlob(sec)).Val(); ttl <= 0 || ttl > q.retention {
		t.Fatalf("blob's time to live %s, want (0, %s]", ttl, q.retention)
	}
	if len(blob) == 0 || len(blob) >= listBytes {
		t.Fatalf("blob of %d bytes for %d bytes of elements", len(blob), listBytes)
	}
	for _, m := range ms {
		if got := mustGet(t, q, m.ID); !reflect.DeepEqual(got, before[m.ID]) {
			t.Errorf("Get of a compacted record\n got %+v\nwant %+v", got, before[m.ID])
		}
	}

	// A retried enqueue of a compacted id: found, not stored again.
	again := *ms[1]
	res, err := q.Enqueue(ctx, &again)
	if err != nil || !res.Existed || res.Message.Status != sms.StatusSent {
		t.Fatalf("retried enqueue of a compacted id = %+v, %v", res, err)
	}
	// A keyed replay under a new id: the first message answers.
	replay := smstest.Message("p", sms.ClassTransactional)
	replay.IdempotencyKey, replay.RequestHash = ms[0].IdempotencyKey, ms[0].RequestHash
	res, err = q.Enqueue(ctx, replay)
	if err != nil || !res.Existed || res.Message.ID != ms[0].ID {
		t.Fatalf("keyed replay of a compacted first message = %+v, %v", res, err)
	}
	if n := q.c.HLen(ctx, q.k.msgs()).Val(); n != 0 {
		t.Fatalf("the replays stored %d messages", n)
	}
	if m, err := q.Cancel(ctx, ms[2].ID, "p"); !errors.Is(err, queue.ErrNotCancelable) || m.Status != sms.StatusFailed {
		t.Fatalf("Cancel of a compacted record = %+v, %v", m, err)
	}
	if _, err := q.Get(ctx, sms.NewID(time.Unix(sec, 999e6))); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Get of an id the blob lacks = %v, want ErrNotFound", err)
	}
}

// compactedCases are the cases of a compacted second, run on Redis
// (TestCompactedSecond) and on a Redis Cluster (TestCompactedCluster).
var compactedCases = []struct {
	name string
	run  func(t *testing.T, q *Queue)
}{
	{"receipt", receiptToCompacted},
	{"late completion", lateCompletion},
}

// TestCompactedSecond runs compactedCases, each on a queue of its own.
func TestCompactedSecond(t *testing.T) {
	t.Parallel()
	for _, tc := range compactedCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newCompacting(t, Config{}))
		})
	}
}

// receiptToCompacted: a receipt by reference or by provider id reaches a
// compacted record (which goes back into the LIST, newer than the blob's),
// writes its event, and a later compaction merges it; a duplicate receipt
// on a compacted record writes nothing.
func receiptToCompacted(t *testing.T, q *Queue) {
	ctx := t.Context()
	ms := sameSecond(3)
	pids := []string{"SM-ref", "SM-pid", "SM-none"}
	for i, m := range ms {
		send(t, q, m, pids[i])
	}
	// The sends' events, claimed so that only the receipts' remain.
	if evs, err := q.ClaimEvents(ctx, "o", time.Hour, 10); err != nil || len(evs) != 3 {
		t.Fatalf("ClaimEvents = %d, %v", len(evs), err)
	}
	sec := secondOf(t, ms[0].ID)
	compactOne(t, q)
	blob := q.c.Get(ctx, q.k.finBlob(sec)).Val()

	out, err := q.ApplyReceipt(ctx, queue.Receipt{Reference: ms[0].ID, Status: sms.StatusDelivered})
	if err != nil || out.Result != queue.ReceiptApplied || out.Message.Status != sms.StatusDelivered {
		t.Fatalf("receipt by reference to a compacted record = %+v, %v", out, err)
	}
	if els := q.c.LRange(ctx, q.k.finAt(sec), 0, -1).Val(); len(els) != 1 || els[0][:12] != queue.FinalShort(ms[0].ID) {
		t.Fatalf("LIST after the receipt = %q: want the record back", els)
	}
	if q.c.Get(ctx, q.k.finBlob(sec)).Val() != blob {
		t.Fatal("the receipt changed the blob")
	}
	if ttl := q.c.PTTL(ctx, q.k.finAt(sec)).Val(); ttl <= 0 {
		t.Fatalf("the LIST taken back has time to live %s", ttl)
	}
	if got := mustGet(t, q, ms[0].ID); got.Status != sms.StatusDelivered {
		t.Fatalf("Get after the receipt = %s, want delivered (the LIST's element over the blob's)", got.Status)
	}
	out, err = q.ApplyReceipt(ctx, queue.Receipt{ProviderID: pids[1], Status: sms.StatusUndelivered, ErrorCode: "E7"})
	if err != nil || out.Result != queue.ReceiptApplied || out.Message.ID != ms[1].ID || out.Message.LastError != "E7" {
		t.Fatalf("receipt by provider id to a compacted record = %+v, %v", out, err)
	}
	evs, err := q.ClaimEvents(ctx, "o", time.Hour, 10)
	if err != nil || len(evs) != 2 {
		t.Fatalf("events of the receipts = %d, %v: want 2", len(evs), err)
	}
	for _, e := range evs {
		if want := map[string]sms.Status{ms[0].ID: sms.StatusDelivered, ms[1].ID: sms.StatusUndelivered}[e.Event.MessageID]; e.Event.Status != want {
			t.Errorf("event %+v, want status %s", e.Event, want)
		}
	}

	compactOne(t, q)
	entries, err := decodeBlob(q.c.Get(ctx, q.k.finBlob(sec)).Val())
	if err != nil || len(entries) != 3 {
		t.Fatalf("merged blob: %d records, %v: want 3", len(entries), err)
	}
	for i, want := range []sms.Status{sms.StatusDelivered, sms.StatusUndelivered, sms.StatusSent} {
		if got := mustGet(t, q, ms[i].ID); got.Status != want {
			t.Errorf("after the merge %s is %s, want %s", ms[i].ID, got.Status, want)
		}
	}
	// A duplicate receipt on a compacted record: answered from the blob,
	// nothing written.
	out, err = q.ApplyReceipt(ctx, queue.Receipt{Reference: ms[0].ID, Status: sms.StatusUndelivered})
	if err != nil || out.Result != queue.ReceiptDuplicate || out.Message.Status != sms.StatusDelivered {
		t.Fatalf("duplicate receipt on a compacted record = %+v, %v", out, err)
	}
	if q.c.Exists(ctx, q.k.finAt(sec)).Val() != 0 {
		t.Fatal("a duplicate receipt wrote the LIST")
	}
	if out, err := q.ApplyReceipt(ctx, queue.Receipt{Reference: sms.NewID(time.Unix(sec, 999e6)), Status: sms.StatusDelivered}); err != nil || out.Result != queue.ReceiptUnknown {
		t.Fatalf("receipt for an id the blob lacks = %+v, %v", out, err)
	}
}

// lateCompletion: a message that completes into a second compacted
// already starts a LIST beside the blob; both are read, and the next
// compaction merges them.
func lateCompletion(t *testing.T, q *Queue) {
	ctx := t.Context()
	ms := sameSecond(2)
	enqueue(t, q, ms...)
	first := take(t, q, time.Hour)
	if err := q.Complete(ctx, first, queue.Outcome{Status: sms.StatusSent, ProviderID: "SM-1", Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	sec := secondOf(t, ms[0].ID)
	compactOne(t, q)
	late := take(t, q, time.Hour)
	if err := q.Complete(ctx, late, queue.Outcome{Status: sms.StatusExpired, Attempts: 0}); err != nil {
		t.Fatal(err)
	}
	if q.c.LLen(ctx, q.k.finAt(sec)).Val() != 1 || q.c.Exists(ctx, q.k.finBlob(sec)).Val() != 1 {
		t.Fatal("want a LIST of the late completion beside the blob")
	}
	if a, b := mustGet(t, q, first.Message.ID), mustGet(t, q, late.Message.ID); a.Status != sms.StatusSent || b.Status != sms.StatusExpired {
		t.Fatalf("Get beside the blob: %s, %s", a.Status, b.Status)
	}
	compactOne(t, q)
	if a, b := mustGet(t, q, first.Message.ID), mustGet(t, q, late.Message.ID); a.Status != sms.StatusSent || b.Status != sms.StatusExpired {
		t.Fatalf("Get after the merge: %s, %s", a.Status, b.Status)
	}
	if q.c.Exists(ctx, q.k.finAt(sec)).Val() != 0 {
		t.Fatal("the merge left the LIST")
	}
}

// TestEnqueueOfAnOldNewID: an id old enough to be in a compacted second,
// stored nowhere, is enqueued as usual (the look-up before the script
// finds nothing).
func TestEnqueueOfAnOldNewID(t *testing.T) {
	t.Parallel()
	q := newCompacting(t, Config{})
	m := smstest.MessageAt("p", sms.ClassOTP, time.Now().Add(-time.Hour))
	enqueue(t, q, m)
	if got := mustGet(t, q, m.ID); got.Status != sms.StatusQueued {
		t.Fatalf("status %s, want queued", got.Status)
	}
}

// TestCompactedRecordsPruned: a blob expires with the retention like the
// LIST it replaced, and a second whose LIST expired before it was
// compacted leaves the compaction ZSET.
func TestCompactedRecordsPruned(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const retention = 1500 * time.Millisecond
	q := newCompacting(t, Config{Retention: retention})
	ms := sameSecond(1)
	send(t, q, ms[0], "SM-1")
	sec := secondOf(t, ms[0].ID)
	compactOne(t, q)
	if ttl := q.c.PTTL(ctx, q.k.finBlob(sec)).Val(); ttl <= 0 || ttl > retention {
		t.Fatalf("blob's time to live %s, want (0, %s]", ttl, retention)
	}
	waitGone(t, q, q.k.finBlob(sec))
	if _, err := q.Get(ctx, ms[0].ID); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Get after the retention = %v, want ErrNotFound", err)
	}

	late := sameSecond(1)[0]
	send(t, q, late, "SM-2")
	waitGone(t, q, q.k.fin(late.ID))
	if q.c.ZCard(ctx, q.k.finDue()).Val() != 1 {
		t.Fatal("want the expired LIST's second still due")
	}
	if n := compactNow(t, q); n != 0 || q.c.ZCard(ctx, q.k.finDue()).Val() != 0 || q.c.Exists(ctx, q.k.fin(late.ID)).Val() != 0 {
		t.Fatalf("compaction of an expired LIST: %d, want 0 and nothing left", n)
	}
}

// waitGone waits until key has expired.
func waitGone(t *testing.T, q *Queue, key string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for q.c.Exists(t.Context(), key).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not expire", key)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCompactionRacesReceipt: a write between a compaction's read and its
// compare-and-set fails the compaction, not the write; a receipt that read
// a blob that was then compacted again reads the new one; and receipts
// racing compactions of their seconds are all kept.
func TestCompactionRacesReceipt(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newCompacting(t, Config{})

	t.Run("receipt between read and swap", func(t *testing.T) {
		ms := sameSecond(2)
		send(t, q, ms[0], "SM-a")
		send(t, q, ms[1], "SM-b")
		sec := secondOf(t, ms[0].ID)
		els := q.c.LRange(ctx, q.k.finAt(sec), 0, -1).Val()
		_, blob := mergedBlob(t, "", els)
		if out, err := q.ApplyReceipt(ctx, queue.Receipt{Reference: ms[0].ID, Status: sms.StatusDelivered}); err != nil || out.Result != queue.ReceiptApplied {
			t.Fatalf("receipt = %+v, %v", out, err)
		}
		keys := []string{q.k.finAt(sec), q.k.finBlob(sec), q.k.finDue()}
		res, err := compactScript.Run(ctx, q.c, keys, fmt.Sprint(sec), listDigest(els), "", blob, 1000).Int()
		if err != nil || res != -1 {
			t.Fatalf("compaction over a changed LIST = %d, %v: want -1", res, err)
		}
		if got := mustGet(t, q, ms[0].ID); got.Status != sms.StatusDelivered {
			t.Fatalf("after the failed swap %s is %s, want delivered", ms[0].ID, got.Status)
		}
		compactNow(t, q)
		if got := mustGet(t, q, ms[0].ID); got.Status != sms.StatusDelivered {
			t.Fatalf("after compaction %s is %s, want delivered", ms[0].ID, got.Status)
		}
	})

	t.Run("blob changed under a receipt", func(t *testing.T) {
		ms := sameSecond(2)
		enqueue(t, q, ms...)
		first := take(t, q, time.Hour)
		if err := q.Complete(ctx, first, queue.Outcome{Status: sms.StatusSent, ProviderID: "SM-c", Attempts: 1}); err != nil {
			t.Fatal(err)
		}
		compactNow(t, q)
		sec := secondOf(t, ms[0].ID)
		old := q.c.Get(ctx, q.k.finBlob(sec)).Val()
		rec, found, err := blobRecord(old, ms[0].ID)
		if err != nil || !found {
			t.Fatalf("blobRecord = %v, %v", found, err)
		}
		// Another completion into the second, compacted: a new blob.
		late := take(t, q, time.Hour)
		if err := q.Complete(ctx, late, queue.Outcome{Status: sms.StatusSent, ProviderID: "SM-d", Attempts: 1}); err != nil {
			t.Fatal(err)
		}
		compactNow(t, q)
		keys := append([]string{q.k.msgs(), q.k.fin(ms[0].ID)}, q.k.outbox()...)
		keys = append(keys, q.k.finBlob(sec), q.k.finDue())
		reply, err := receiptScript.Run(ctx, q.c, keys, ms[0].ID, "v", "", mustIDTime(t, ms[0].ID).UnixMilli(),
			listElement(ms[0].ID, rec), blobSHA(old)).Slice()
		if err != nil || len(reply) != 2 || reply[0] != int64(5) || reply[1] == old {
			t.Fatalf("receipt with a stale blob = %v, %v: want {5, the new blob}", reply, err)
		}
		if q.c.Exists(ctx, q.k.finAt(sec)).Val() != 0 {
			t.Fatal("a receipt with a stale blob wrote the LIST")
		}
		if out, err := q.ApplyReceipt(ctx, queue.Receipt{Reference: ms[0].ID, Status: sms.StatusDelivered}); err != nil || out.Result != queue.ReceiptApplied {
			t.Fatalf("receipt = %+v, %v", out, err)
		}
		if got := mustGet(t, q, ms[0].ID); got.Status != sms.StatusDelivered {
			t.Fatalf("%s is %s, want delivered", ms[0].ID, got.Status)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		const n = 60
		var ids []string
		for k := range 3 { // three seconds of the last minute
			for _, m := range sameSecondAt(time.Now().Truncate(time.Second).Add(-time.Duration(10+k)*time.Second), n/3) {
				send(t, q, m, "SM-"+m.ID)
				ids = append(ids, m.ID)
			}
		}
		if _, err := q.ClaimEvents(ctx, "o", time.Hour, 1000); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var compactor sync.WaitGroup
		compactor.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := q.Compact(ctx, 100); err != nil {
					t.Error(err)
					return
				}
			}
		})
		var senders sync.WaitGroup
		for w := range 4 {
			senders.Go(func() {
				for i := w; i < len(ids); i += 4 {
					r := queue.Receipt{Reference: ids[i], Status: sms.StatusDelivered}
					if i%2 == 0 {
						r = queue.Receipt{ProviderID: "SM-" + ids[i], Status: sms.StatusDelivered}
					}
					if out, err := q.ApplyReceipt(ctx, r); err != nil || out.Result != queue.ReceiptApplied {
						t.Errorf("receipt for %s = %+v, %v", ids[i], out, err)
					}
				}
			})
		}
		senders.Wait()
		close(stop)
		compactor.Wait()
		compactNow(t, q)
		for _, id := range ids {
			if got := mustGet(t, q, id); got.Status != sms.StatusDelivered {
				t.Errorf("%s is %s after racing compactions: a receipt was lost", id, got.Status)
			}
		}
		evs, err := q.ClaimEvents(ctx, "o", time.Hour, 1000)
		if err != nil || len(evs) != len(ids) {
			t.Fatalf("events of the receipts = %d, %v: want %d", len(evs), err, len(ids))
		}
	})
}

// TestCompactedCluster: compaction, compacted reads, receipts, a late
// completion and the claims of two replicas on a Redis Cluster (every key
// of a second is in the account's slot).
func TestCompactedCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	addrs := redistest.StartCluster(t)
	q := openWith(t, Config{Client: redistest.ClusterClient(t, addrs), Account: redistest.Prefix(t), CompactAfter: time.Nanosecond})
	if _, ok := q.c.(*redis.ClusterClient); !ok {
		t.Fatal("not a cluster client")
	}
	for _, tc := range compactedCases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, q) })
	}
	t.Run("claim", func(t *testing.T) { compactClaimOnCluster(t, q) })
}

// TestBlobCodec: a blob keeps every record of any version and the LIST
// elements of both namings; a LIST element replaces the blob's record of
// the same message; a look-up of an absent name inflates nothing; a
// malformed blob is an error, never a wrong record.
func TestBlobCodec(t *testing.T) {
	t.Parallel()
	base := time.Now().Truncate(time.Second)
	id := func(ms int) string { return sms.NewID(base.Add(time.Duration(ms) * time.Millisecond)) }
	a, b, c := id(1), id(2), id(3)
	v3 := "3s1\x1f\x1f\x1fp\x1fref\x1fSM-1\x1f+8190*45678\x1f1ip6zs0\x1f1zq\x1f1zq"
	v2 := "2\x1fs\x1f1\x1f1\x1f1\x1f\x1fp\x1fref-1\x1fpm-old\x1f+8190****5678\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f1jk\x1f="
	els := []string{listElement(a, v3), listElement(b, v2), listElement(c, v3)}
	if els[1] != b[4:]+"\x1f"+v2 {
		t.Fatalf("element of a version 2 record: %q", els[1])
	}
	_, blob := mergedBlob(t, "", els)
	for _, tc := range []struct{ id, rec string }{{a, v3}, {b, v2}, {c, v3}} {
		rec, found, err := blobRecord(blob, tc.id)
		if err != nil || !found || rec != tc.rec {
			t.Errorf("blobRecord(%s) = %q, %v, %v; want %q", tc.id, rec, found, err, tc.rec)
		}
		if _, err := queue.DecodeFinal(tc.id, tc.rec); err != nil {
			t.Errorf("DecodeFinal of %q: %v", tc.rec, err)
		}
	}
	delivered := strings.Replace(v3, "3s1", "3v1", 1)
	merged, err := mergeBlob(blob, []string{listElement(a, delivered)})
	if err != nil || len(merged) != 3 || merged[0].rec != delivered {
		t.Fatalf("merge of a newer element = %+v, %v", merged, err)
	}
	if _, found, err := blobRecord(blob[:len(blob)-5], id(4)); found || err != nil {
		t.Fatalf("look-up of an absent name in a truncated blob = %v, %v: want not found, no inflate", found, err)
	}
	for _, bad := range []string{"", "\x02", blob[:len(blob)-5], "\x01\x05abc", "\x01\x02" + strings.Repeat("n", 23), "\x01\xff"} {
		if _, err := decodeBlob(bad); err == nil {
			t.Errorf("decodeBlob(%q) succeeded", bad)
		}
	}
	// An old name whose 13th character is a '3' is still an old name.
	for {
		old := id(5)
		if old[16] != '3' {
			continue
		}
		e, ok := listEntry(listElement(old, v2))
		if !ok || e.short != queue.FinalShort(old) || e.rec != v2 {
			t.Fatalf("listEntry of an old name with a '3' = %+v, %v", e, ok)
		}
		break
	}
	if _, err := mergeBlob("", []string{"short"}); err == nil {
		t.Error("mergeBlob took an element without a name")
	}
}

// TestCompactedRecordOfAnEarlierRelease: an element an earlier release
// wrote (named by the id without "msg_", a version 2 record) is compacted
// with the rest of its second when that second is due, read back, and a
// receipt puts it back into the LIST under its own naming, where the
// scripts edit it.
func TestCompactedRecordOfAnEarlierRelease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newCompacting(t, Config{})
	id := sms.NewID(time.Now().Add(-time.Minute))
	sec := secondOf(t, id)
	v2 := "2\x1fs\x1f1\x1f1\x1f1\x1f\x1fp\x1fref-1\x1fpm-old\x1f+8190****5678\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f1jk\x1f="
	if err := q.c.RPush(ctx, q.k.finAt(sec), id[4:]+"\x1f"+v2).Err(); err != nil {
		t.Fatal(err)
	}
	q.c.PExpire(ctx, q.k.finAt(sec), time.Hour)
	// An earlier release did not record the second as due; a completion
	// into it now does.
	late := smstest.MessageAt("p", sms.ClassTransactional, time.Unix(sec, 500e6))
	send(t, q, late, "SM-late")
	before := mustGet(t, q, id)
	compactOne(t, q)
	if got := mustGet(t, q, id); !reflect.DeepEqual(got, before) {
		t.Fatalf("Get of a compacted version 2 record\n got %+v\nwant %+v", got, before)
	}
	out, err := q.ApplyReceipt(ctx, queue.Receipt{Reference: id, Status: sms.StatusDelivered})
	if err != nil || out.Result != queue.ReceiptApplied || out.Message.Status != sms.StatusDelivered {
		t.Fatalf("receipt to a compacted version 2 record = %+v, %v", out, err)
	}
	if els := q.c.LRange(ctx, q.k.finAt(sec), 0, -1).Val(); len(els) != 1 || !strings.HasPrefix(els[0], id[4:]+"\x1f2\x1fdelivered\x1f") {
		t.Fatalf("LIST after the receipt = %q", els)
	}
	compactNow(t, q)
	if got := mustGet(t, q, id); got.Status != sms.StatusDelivered {
		t.Fatalf("after the merge: %s", got.Status)
	}
	if got := mustGet(t, q, late.ID); got.Status != sms.StatusSent {
		t.Fatalf("the late completion after the merge: %s", got.Status)
	}
}

// BenchmarkBlobRecord is what a read of a compacted record costs in Go: a
// blob of one second at 90/s, looked up by a present and an absent id
// (the absent one is not inflated).
//
//	go test -run '^$' -bench BlobRecord ./internal/queue/redisq
func BenchmarkBlobRecord(b *testing.B) {
	var els []string
	var ids []string
	for i := range queuetest.FullPace {
		m := sizeMsg(i)
		m.ID = sms.NewID(sizeStart.Truncate(time.Second).Add(time.Duration(i*11) * time.Millisecond)) // all in one second
		m.Status, m.Attempts = sms.StatusDelivered, 1
		m.ProviderID = fmt.Sprintf("SM%032x", sha256.Sum256([]byte(m.ID)))[:34]
		m.UpdatedAt, m.SentAt = m.CreatedAt.Add(3*time.Second), m.CreatedAt.Add(time.Second)
		rec, err := queue.EncodeFinal(m)
		if err != nil {
			b.Fatal(err)
		}
		els, ids = append(els, listElement(m.ID, rec)), append(ids, m.ID)
	}
	entries, blob := mergedBlob(b, "", els)
	b.Run("present", func(b *testing.B) {
		for b.Loop() {
			if _, found, err := blobRecord(blob, ids[len(ids)/2]); !found || err != nil {
				b.Fatal(found, err)
			}
		}
		b.ReportMetric(float64(len(blob)), "blob-B")
	})
	b.Run("compact", func(b *testing.B) {
		for b.Loop() {
			if _, err := encodeBlob(entries); err != nil {
				b.Fatal(err)
			}
		}
	})
}
