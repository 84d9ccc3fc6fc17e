package redisq

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strconv"
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

// TestRecordKeepsEveryField: every field of sms.Message, set to a value of
// its own, survives toRecord, JSON and decodeStored (times at ms). A field
// added to the domain type fails here until the record stores it.
func TestRecordKeepsEveryField(t *testing.T) {
	t.Parallel()
	m := &sms.Message{}
	queuetest.FillEveryField(t, m)
	r, err := toRecord(m)
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeStored(m.ID, string(js))
	if err != nil {
		t.Fatalf("decodeStored(%s): %v", js, err)
	}
	if !equalMessages(got, m) {
		t.Fatalf("through the record %s\n got %+v\nwant %+v", js, got, m)
	}
}

// The two stored forms the scripts must edit: a record as this release
// writes it, and a legacy message as earlier releases wrote it (sms.Message
// JSON after their enqueue script). Both are queued otp messages of producer
// p with a not-before in the past.
const (
	seedRecord = `{"p":"p","c":0,"to":"+819012345678","b":"hello","g":1,"tc":%d,"tb":%d,"tu":%d,"s":"q"}`
	seedLegacy = `{"id":"%s","producer":"p","class":"otp","to":"+819012345678","body":"hello","segments":1,` +
		`"created_at":"%s","not_before":"%s","status":"queued","attempts":0,"updated_at":"%s"}`
)

// seedStored stores a queued otp message of producer p in either form,
// ready at once, with its outstanding count, as an enqueue would.
func seedStored(t *testing.T, q *Queue, legacy bool, id string, created time.Time) {
	t.Helper()
	ctx := t.Context()
	nb := created.Add(-time.Minute)
	value := fmt.Sprintf(seedRecord, created.UnixMilli(), nb.UnixMilli(), created.UnixMilli())
	if legacy {
		iso := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
		value = fmt.Sprintf(seedLegacy, id, iso(created), iso(nb), iso(created))
	}
	seq := q.c.Incr(ctx, q.k.seq()).Val()
	if err := q.c.HSet(ctx, q.k.msgs(), id, value).Err(); err != nil {
		t.Fatal(err)
	}
	if err := q.c.ZAdd(ctx, q.k.ready(sms.ClassOTP), redis.Z{Score: 1, Member: fmt.Sprintf("%016d:%s", seq, id)}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := q.c.HIncrBy(ctx, q.k.outstanding(), "p", 1).Err(); err != nil {
		t.Fatal(err)
	}
}

// storedFields is the stored value of id as JSON fields.
func storedFields(t *testing.T, q *Queue, id string) map[string]any {
	t.Helper()
	var f map[string]any
	if err := json.Unmarshal([]byte(q.c.HGet(t.Context(), q.k.msgs(), id).Val()), &f); err != nil {
		t.Fatalf("stored value of %s: %v", id, err)
	}
	return f
}

// aTime stands, in an expectation, for a time written by the script: near
// now plus the offset.
type aTime struct{ offset time.Duration }

// legacyNames are the legacy form of the record fields the scripts write.
var legacyNames = map[string]string{"s": "status", "a": "attempts", "e": "last_error", "pm": "provider_message_id",
	"d": "dead", "tb": "not_before", "tu": "updated_at", "ts": "sent_at", "qm": "qm", "rs": "rs", "re": "re"}

var legacyWords = map[string]string{"q": "queued", "l": "sending", "s": "sent", "f": "failed", "x": "expired",
	"v": "delivered", "u": "undelivered", "c": "canceled"}

// aMember is a ready ZSET member of the message: the scripts keep it in qm
// so that Cancel can take the message out of line.
type aMember struct{}

// checkField compares one stored field with its expectation in record form,
// translated for a legacy message.
func checkField(t *testing.T, legacy bool, name string, got, want any, at time.Time) {
	t.Helper()
	if legacy && name == "s" {
		want = legacyWords[want.(string)]
	}
	if _, ok := want.(aMember); ok {
		if s, _ := got.(string); len(s) < 18 || s[16] != ':' {
			t.Errorf("field %s = %v, want a ready member", name, got)
		}
		return
	}
	tm, isTime := want.(aTime)
	switch {
	case !isTime:
		if got != want {
			t.Errorf("field %s = %v (%T), want %v (%T)", name, got, got, want, want)
		}
	case legacy:
		s, _ := got.(string)
		parsed, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || parsed.Sub(at.Add(tm.offset)).Abs() > 2*time.Second {
			t.Errorf("field %s = %v, want an RFC 3339 time near %v", name, got, at.Add(tm.offset))
		}
	default:
		ms, _ := got.(float64)
		if ms != math.Trunc(ms) || time.UnixMilli(int64(ms)).Sub(at.Add(tm.offset)).Abs() > 2*time.Second {
			t.Errorf("field %s = %v, want Unix ms near %v", name, got, at.Add(tm.offset))
		}
	}
}

// scriptEdit is one row of the state table of the scripts that edit a
// stored message.
type scriptEdit struct {
	name  string
	setup func(t *testing.T, q *Queue) *queue.Leased // before the call under test; nil: none
	call  func(t *testing.T, q *Queue, l *queue.Leased) error
	want  map[string]any // changed fields by record name; nil: removed
}

var scriptEdits = []scriptEdit{
	{"take", nil,
		func(t *testing.T, q *Queue, _ *queue.Leased) error {
			_, _, err := q.Take(t.Context(), queue.TakeOptions{Owner: "w", Lease: time.Hour})
			return err
		},
		map[string]any{"s": "l", "tu": aTime{}}},
	{"requeue spending an attempt, after 1h", takeHour,
		func(t *testing.T, q *Queue, l *queue.Leased) error {
			return q.Requeue(t.Context(), l, queue.RequeueOptions{After: time.Hour, SpendAttempt: true, LastError: "503"})
		},
		map[string]any{"s": "q", "a": 1.0, "e": "503", "tb": aTime{time.Hour}, "tu": aTime{}, "qm": aMember{}}},
	{"requeue for a rate wait", takeHour,
		func(t *testing.T, q *Queue, l *queue.Leased) error {
			return q.Requeue(t.Context(), l, queue.RequeueOptions{})
		},
		map[string]any{"s": "q", "tu": aTime{}, "qm": aMember{}}},
	{"dead", takeHour,
		func(t *testing.T, q *Queue, l *queue.Leased) error { return q.Dead(t.Context(), l, "gave up", 5) },
		map[string]any{"s": "f", "d": true, "a": 5.0, "e": "gave up", "tu": aTime{}}},
	{"recover", takeExpired,
		func(t *testing.T, q *Queue, _ *queue.Leased) error {
			recoverOne(t, q)
			return nil
		},
		map[string]any{"s": "q", "tu": aTime{}}},
	{"retry dead letter",
		func(t *testing.T, q *Queue) *queue.Leased {
			l := takeHour(t, q)
			if err := q.Dead(t.Context(), l, "gave up", 5); err != nil {
				t.Fatal(err)
			}
			return l
		},
		func(t *testing.T, q *Queue, l *queue.Leased) error { return q.RetryDead(t.Context(), l.Message.ID) },
		map[string]any{"s": "q", "d": nil, "a": nil, "tb": nil, "tu": aTime{}, "qm": aMember{}}},
	{"receipt parked", takeHour,
		func(t *testing.T, q *Queue, l *queue.Leased) error {
			_, err := q.ApplyReceipt(t.Context(), queue.Receipt{Reference: l.Message.ID, Status: sms.StatusUndelivered, ErrorCode: "E2"})
			return err
		},
		map[string]any{"rs": "u", "re": "E2"}},
}

// TestCompleteLeavesFinalRecord: from a seeded record and from a seeded
// legacy message, Complete removes the message from msgs and appends its
// final record, without body or full number, to the list of its creation
// second, which expires after the retention.
func TestCompleteLeavesFinalRecord(t *testing.T) {
	t.Parallel()
	for _, legacy := range []bool{false, true} {
		for _, o := range []queue.Outcome{
			{Status: sms.StatusSent, ProviderID: "pm-1", Attempts: 2},
			{Status: sms.StatusFailed, Reason: "bad number", Attempts: 1},
		} {
			t.Run(fmt.Sprintf("%s/legacy=%v", o.Status, legacy), func(t *testing.T) {
				t.Parallel()
				q := newShared(t)
				id := sms.NewID(time.Now())
				seedStored(t, q, legacy, id, time.Now().Add(-time.Hour).Truncate(time.Millisecond))
				l := takeHour(t, q)
				if err := q.Complete(t.Context(), l, o); err != nil {
					t.Fatal(err)
				}
				wantFinalRecord(t, q, id)
				got, err := q.Get(t.Context(), id)
				if err != nil {
					t.Fatal(err)
				}
				want := sms.Message{ID: id, Producer: "p", Class: sms.ClassOTP, To: "+8190****5678", Segments: 1,
					Encoding: sms.GSM7, Status: o.Status, Attempts: o.Attempts, ProviderID: o.ProviderID, LastError: o.Reason}
				if got.To != want.To || got.Body != "" || got.Status != want.Status || got.Attempts != want.Attempts ||
					got.ProviderID != want.ProviderID || got.LastError != want.LastError || got.Segments != 1 ||
					got.Producer != "p" || got.UpdatedAt.IsZero() || (o.Status == sms.StatusSent) == got.SentAt.IsZero() {
					t.Fatalf("Get = %+v, want %+v", got, want)
				}
			})
		}
	}
}

// wantFinalRecord checks that message id left msgs for one final record,
// without the seeded body or full number, in the LIST of its creation
// second, which expires within the retention.
func wantFinalRecord(t *testing.T, q *Queue, id string) {
	t.Helper()
	if q.c.HExists(t.Context(), q.k.msgs(), id).Val() {
		t.Fatal("the finished message is still in msgs")
	}
	els := q.c.LRange(t.Context(), q.k.fin(id), 0, -1).Val()
	if len(els) != 1 || !strings.HasPrefix(els[0], queue.FinalShort(id)+"3") {
		t.Fatalf("final list = %q", els)
	}
	for _, secret := range []string{"hello", "9012345678"} {
		if strings.Contains(els[0], secret) {
			t.Fatalf("final record %q keeps %q", els[0], secret)
		}
	}
	if ttl := q.c.PTTL(t.Context(), q.k.fin(id)).Val(); ttl <= 0 || ttl > q.retention {
		t.Fatalf("final list TTL %v, want (0, %v]", ttl, q.retention)
	}
}

// TestCancelLeavesFinalRecord: from a seeded record and from a seeded
// legacy message, Cancel does what Complete does with a message: it leaves
// msgs for a final record without body or full number,
// and its producer's outstanding count drops; the answer is that record.
func TestCancelLeavesFinalRecord(t *testing.T) {
	t.Parallel()
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			t.Parallel()
			q := newShared(t)
			ctx := t.Context()
			id := sms.NewID(time.Now())
			seedStored(t, q, legacy, id, time.Now().Add(-time.Hour).Truncate(time.Millisecond))
			got, err := q.Cancel(ctx, id, "p")
			if err != nil {
				t.Fatal(err)
			}
			wantFinalRecord(t, q, id)
			read, err := q.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			for what, m := range map[string]*sms.Message{"Cancel": got, "Get": read} {
				if m.Status != sms.StatusCanceled || m.To != "+8190****5678" || m.Body != "" || m.Producer != "p" ||
					m.UpdatedAt.IsZero() || !m.SentAt.IsZero() {
					t.Fatalf("%s = %+v, want the canceled final record", what, m)
				}
			}
			if _, err := q.Cancel(ctx, id, "p"); !errors.Is(err, queue.ErrNotCancelable) {
				t.Fatalf("second Cancel: %v, want ErrNotCancelable", err)
			}
			// The next take finds nothing: a member of a record without qm
			// (the seeded ones; a message enqueued now has it, and Cancel
			// removes it: the conformance suite's Cancel) is dropped by Take
			// when its message is gone.
			if _, _, err := q.Take(ctx, queue.TakeOptions{Owner: "w", Lease: time.Hour}); !errors.Is(err, queue.ErrEmpty) {
				t.Fatalf("Take after cancel: %v, want ErrEmpty", err)
			}
		})
	}
}

// TestScriptsEditRecords is the state table of every script that edits a
// stored message: from a seeded record and from a seeded legacy message, the
// call under test changes exactly the fields listed (record names; a legacy
// message gets them under its own names and in its own forms) and no other.
func TestScriptsEditRecords(t *testing.T) {
	t.Parallel()
	for _, tc := range scriptEdits {
		for _, legacy := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/legacy=%v", tc.name, legacy), func(t *testing.T) {
				t.Parallel()
				q := newShared(t)
				id := sms.NewID(time.Now())
				seedStored(t, q, legacy, id, time.Now().Add(-time.Hour).Truncate(time.Millisecond))
				var l *queue.Leased
				if tc.setup != nil {
					l = tc.setup(t, q)
				}
				before := storedFields(t, q, id)
				at := time.Now()
				if err := tc.call(t, q, l); err != nil {
					t.Fatal(err)
				}
				checkEdit(t, legacy, before, storedFields(t, q, id), tc.want, at)
			})
		}
	}
}

// checkEdit compares the stored fields after a call with those before and
// the expected changes (by record name) of a call made at.
func checkEdit(t *testing.T, legacy bool, before, after, want map[string]any, at time.Time) {
	t.Helper()
	names := map[string]string{} // stored name -> record name
	for f := range want {
		if legacy {
			names[legacyNames[f]] = f
		} else {
			names[f] = f
		}
	}
	for name, v := range after {
		f, listed := names[name]
		switch {
		case listed && want[f] == nil:
			t.Errorf("field %s = %v, want it removed", name, v)
		case listed:
			checkField(t, legacy, f, v, want[f], at)
		case !reflect.DeepEqual(v, before[name]):
			t.Errorf("field %s changed from %v to %v", name, before[name], v)
		}
	}
	for name, f := range names {
		if _, ok := after[name]; !ok && want[f] != nil {
			t.Errorf("field %s missing", name)
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok && names[name] == "" {
			t.Errorf("field %s removed", name)
		}
	}
}

func takeHour(t *testing.T, q *Queue) *queue.Leased { return take(t, q, time.Hour) }

func takeExpired(t *testing.T, q *Queue) *queue.Leased { return take(t, q, time.Millisecond) }

// recoverOne calls Recover until it has handed one lease back.
func recoverOne(t *testing.T, q *Queue) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, err := q.Recover(t.Context())
		if err != nil || n > 1 {
			t.Fatalf("Recover = %d, %v", n, err)
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("lease not recovered")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLegacyMessages: messages an earlier release stored (sms.Message JSON)
// are read exactly, taken, requeued, completed, recovered, made dead letters
// and retried by this release, and an idempotent replay returns them.
func TestLegacyMessages(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newShared(t)
	created := time.Date(2026, 11, 30, 9, 0, 0, 123456789, time.UTC)
	ids := make([]string, 3)
	for i := range ids {
		ids[i] = sms.NewID(time.Now())
		seedStored(t, q, true, ids[i], created)
	}
	if err := q.c.Set(ctx, q.k.idem("p", "k1"), ids[0], time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := q.Get(ctx, ids[0])
	want := &sms.Message{ID: ids[0], Producer: "p", Class: sms.ClassOTP, To: "+819012345678", Body: "hello",
		Segments: 1, CreatedAt: created, NotBefore: created.Add(-time.Minute), Status: sms.StatusQueued, UpdatedAt: created}
	if err != nil || !equalMessages(got, want) {
		t.Fatalf("Get of a legacy message = %+v, %v\nwant %+v", got, err, want)
	}
	replay := msg("p", sms.ClassOTP)
	replay.IdempotencyKey = "k1"
	if res, err := q.Enqueue(ctx, replay); err != nil || !res.Existed || !equalMessages(res.Message, want) {
		t.Fatalf("replay of a legacy message's key = %+v, %v", res, err)
	}

	// The first: requeued spending an attempt, then sent.
	l := take(t, q, time.Hour)
	if l.Message.ID != ids[0] || l.Message.Status != sms.StatusSending || !l.Message.CreatedAt.Equal(created) {
		t.Fatalf("Take = %+v, want %s sending", l.Message, ids[0])
	}
	if err := q.Requeue(ctx, l, queue.RequeueOptions{SpendAttempt: true, LastError: "503"}); err != nil {
		t.Fatal(err)
	}
	if l = take(t, q, time.Hour); l.Message.ID != ids[1] {
		t.Fatalf("took %s, want %s ahead of the requeued one", l.Message.ID, ids[1])
	}
	// The second: a dead letter, retried.
	if err := q.Dead(ctx, l, "gave up", 3); err != nil {
		t.Fatal(err)
	}
	dl, err := q.DeadLetters(ctx, 10)
	if err != nil || len(dl) != 1 || dl[0].ID != ids[1] || !dl[0].Dead || dl[0].Attempts != 3 || dl[0].LastError != "gave up" {
		t.Fatalf("DeadLetters = %+v, %v", dl, err)
	}
	if err := q.RetryDead(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	// The third: its lease expires and is recovered.
	if l = take(t, q, time.Millisecond); l.Message.ID != ids[2] {
		t.Fatalf("took %s, want %s", l.Message.ID, ids[2])
	}
	recoverOne(t, q)
	for _, id := range []string{ids[2], ids[0], ids[1]} { // recovered at its old place
		l := take(t, q, time.Hour)
		if l.Message.ID != id {
			t.Fatalf("took %s, want %s", l.Message.ID, id)
		}
		if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm-" + id, Attempts: 2}); err != nil {
			t.Fatal(err)
		}
		m, err := q.Get(ctx, id)
		if err != nil || m.Status != sms.StatusSent || m.ProviderID != "pm-"+id || m.SentAt.IsZero() ||
			m.Attempts != 2 || m.Dead || !m.CreatedAt.Equal(created.Truncate(time.Millisecond)) { // a final record keeps ms
			t.Fatalf("Get %s after Complete = %+v, %v", id, m, err)
		}
	}
	if n, err := q.Outstanding(ctx, "p"); err != nil || n != 0 {
		t.Fatalf("Outstanding = %d, %v: want 0", n, err)
	}
	if _, _, err := q.Take(ctx, queue.TakeOptions{Owner: "w", Lease: time.Hour}); !errors.Is(err, queue.ErrEmpty) {
		t.Fatalf("Take at the end: %v, want ErrEmpty", err)
	}
}

// TestDeadLettersPrunedAfterRetention: a dead letter older than the
// retention is deleted by the next Complete, as final records expire; one
// within it stays.
func TestDeadLettersPrunedAfterRetention(t *testing.T) {
	t.Parallel()
	deadPruned(t, sms.ClassOTP, "Complete", func(q *Queue) error {
		enqueue(t, q, msg("p", sms.ClassOTP))
		return q.Complete(t.Context(), takeHour(t, q), queue.Outcome{Status: sms.StatusSent, ProviderID: "pm", Attempts: 1})
	})
}

// TestReceiptsOnFinalRecords: a receipt for a sent message (by our id or by
// the provider's) moves its final record on, keeping the send time; one
// parked before the send was recorded is applied by Complete; a second is a
// duplicate. From a seeded record and from a seeded legacy message.
func TestReceiptsOnFinalRecords(t *testing.T) {
	t.Parallel()
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprintf("legacy=%v", legacy), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			q := newShared(t)
			sent, parked := sms.NewID(time.Now()), sms.NewID(time.Now())
			seedStored(t, q, legacy, sent, time.Now().Add(-time.Hour).Truncate(time.Millisecond))
			seedStored(t, q, legacy, parked, time.Now().Add(-time.Hour).Truncate(time.Millisecond))
			l := takeHour(t, q)
			if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm-1", Attempts: 1}); err != nil {
				t.Fatal(err)
			}
			before, err := q.Get(ctx, l.Message.ID)
			if err != nil || before.Status != sms.StatusSent {
				t.Fatalf("Get after Complete = %+v, %v", before, err)
			}
			out, err := q.ApplyReceipt(ctx, queue.Receipt{ProviderID: "pm-1", Status: sms.StatusDelivered, ErrorCode: "E1"})
			if err != nil || out.Result != queue.ReceiptApplied || out.Message.Status != sms.StatusDelivered {
				t.Fatalf("receipt by provider id = %+v, %v", out, err)
			}
			got, err := q.Get(ctx, l.Message.ID)
			if err != nil || got.Status != sms.StatusDelivered || got.LastError != "E1" || !got.SentAt.Equal(before.SentAt) ||
				got.UpdatedAt.Before(before.UpdatedAt) || got.ProviderID != "pm-1" || got.Body != "" {
				t.Fatalf("Get after the receipt = %+v, %v (before %+v)", got, err, before)
			}
			out, err = q.ApplyReceipt(ctx, queue.Receipt{Reference: l.Message.ID, Status: sms.StatusUndelivered})
			if err != nil || out.Result != queue.ReceiptDuplicate || out.Message.Status != sms.StatusDelivered {
				t.Fatalf("second receipt = %+v, %v: want a duplicate", out, err)
			}
			l = takeHour(t, q)
			if out, err := q.ApplyReceipt(ctx, queue.Receipt{Reference: l.Message.ID, Status: sms.StatusUndelivered, ErrorCode: "E2"}); err != nil || out.Result != queue.ReceiptParked {
				t.Fatalf("early receipt = %+v, %v: want parked", out, err)
			}
			if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm-2", Attempts: 1}); err != nil {
				t.Fatal(err)
			}
			got, err = q.Get(ctx, l.Message.ID)
			if err != nil || got.Status != sms.StatusUndelivered || got.LastError != "E2" || got.ProviderID != "pm-2" ||
				got.Attempts != 1 || got.SentAt.IsZero() {
				t.Fatalf("Get after Complete with a parked receipt = %+v, %v", got, err)
			}
		})
	}
}

// TestFinalRecordsOfAnEarlierRelease: a final LIST element as the release
// before version 3 wrote it (named by the id without "msg_", a version 2
// record) and its provider id's STRING key (keys.pid) still serve Get, a
// receipt by the provider's id (which rewrites the element under its own
// name) and a retried enqueue of the same id; a version 3 element does
// the same through the provider-id index.
func TestFinalRecordsOfAnEarlierRelease(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newShared(t)
	id := sms.NewID(time.Now().Add(-time.Minute))
	v2 := "2\x1fs\x1f1\x1f1\x1f1\x1f\x1fp\x1fref-1\x1fpm-old\x1f+8190****5678\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f\x1f1jk\x1f="
	if err := q.c.RPush(ctx, q.k.fin(id), id[4:]+"\x1f"+v2).Err(); err != nil {
		t.Fatal(err)
	}
	if err := q.c.Set(ctx, q.k.pid("pm-old"), id, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	m, err := q.Get(ctx, id)
	if err != nil || m.Status != sms.StatusSent || m.ProviderID != "pm-old" || m.To != "+8190****5678" || m.Reference != "ref-1" ||
		m.Class != sms.ClassTransactional || m.SentAt.IsZero() {
		t.Fatalf("Get of a version 2 element = %+v, %v", m, err)
	}
	out, err := q.ApplyReceipt(ctx, queue.Receipt{ProviderID: "pm-old", Status: sms.StatusDelivered})
	if err != nil || out.Result != queue.ReceiptApplied || out.Message.ID != id || out.Message.Status != sms.StatusDelivered {
		t.Fatalf("receipt by the provider id's old key = %+v, %v", out, err)
	}
	els := q.c.LRange(ctx, q.k.fin(id), 0, -1).Val()
	if len(els) != 1 || !strings.HasPrefix(els[0], id[4:]+"\x1f2\x1fdelivered\x1f") {
		t.Fatalf("element after the receipt = %q", els)
	}
	again := msg("p", sms.ClassTransactional)
	again.ID = id
	res, err := q.Enqueue(ctx, again)
	if err != nil || !res.Existed || res.Message.Status != sms.StatusDelivered {
		t.Fatalf("retried enqueue of a version 2 element's id = %+v, %v", res, err)
	}
	if n := q.c.HLen(ctx, q.k.msgs()).Val(); n != 0 {
		t.Fatalf("the retried enqueue stored %d messages", n)
	}

	// Version 3: the same through the provider-id index.
	enqueue(t, q, msg("p", sms.ClassOTP))
	l := takeHour(t, q)
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm-new", Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	if n := q.c.Exists(ctx, q.k.pid("pm-new")).Val(); n != 0 {
		t.Fatal("Complete wrote the old provider-id key")
	}
	out, err = q.ApplyReceipt(ctx, queue.Receipt{ProviderID: "pm-new", Status: sms.StatusUndelivered, ErrorCode: "E9"})
	if err != nil || out.Result != queue.ReceiptApplied || out.Message.ID != l.Message.ID || out.Message.LastError != "E9" {
		t.Fatalf("receipt by the provider-id index = %+v, %v", out, err)
	}
	again = msg("p", sms.ClassOTP)
	again.ID = l.Message.ID
	res, err = q.Enqueue(ctx, again)
	if err != nil || !res.Existed || res.Message.Status != sms.StatusUndelivered {
		t.Fatalf("retried enqueue of a version 3 element's id = %+v, %v", res, err)
	}
	if out, err := q.ApplyReceipt(ctx, queue.Receipt{ProviderID: "pm-none", Status: sms.StatusDelivered}); err != nil || out.Result != queue.ReceiptUnknown {
		t.Fatalf("receipt for an unknown provider id = %+v, %v", out, err)
	}
}

// TestProviderIDIndexIsCompact: at a full hour's pace the index is small
// HASHes in their listpack encoding, each expiring with the retention, one
// field per sent message; and a lookup finds an entry written in any
// generation the retention spans.
func TestProviderIDIndexIsCompact(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newShared(t)
	enqueue(t, q, msg("p", sms.ClassOTP))
	l := takeHour(t, q)
	before := time.Now()
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "x", Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	created := mustIDTime(t, l.Message.ID)
	key, field, _ := q.k.pidIndexEntry("x", created, before)
	if !q.c.HExists(ctx, key, field).Val() { // the hour turned during Complete
		key, _, _ = q.k.pidIndexEntry("x", created, time.Now())
	}
	// 100 more entries in its HASH: what an hour at ~110 sends a second
	// puts in one.
	for i := range 100 {
		_, field := pidEntry(fmt.Sprint("x", i))
		if err := q.c.HSet(ctx, key, field, -60).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if n := q.c.HLen(ctx, key).Val(); n != 101 {
		t.Fatalf("index HASH has %d fields, want 101", n)
	}
	if enc := q.c.ObjectEncoding(ctx, key).Val(); enc != "listpack" && enc != "ziplist" {
		t.Fatalf("index HASH encoding %q", enc)
	}
	if ttl := q.c.PTTL(ctx, key).Val(); ttl <= q.retention || ttl > q.retention+pidGeneration {
		t.Fatalf("index HASH TTL %v, want (%v, %v]", ttl, q.retention, q.retention+pidGeneration)
	}
	// An entry of a generation a day old (retention 7 days) is found.
	old := sms.NewID(time.Now().Add(-25 * time.Hour))
	oldKey, field, value := q.k.pidIndexEntry("y", mustIDTime(t, old), time.Now().Add(-24*time.Hour))
	if err := q.c.HSet(ctx, oldKey, field, value).Err(); err != nil {
		t.Fatal(err)
	}
	sentAt := time.Now().Add(-24 * time.Hour)
	rec, err := queue.EncodeFinal(&sms.Message{ID: old, Producer: "p", Class: sms.ClassOTP, To: "+819012345678",
		ProviderID: "y", Status: sms.StatusSent, Attempts: 1, Segments: 1, UpdatedAt: sentAt, SentAt: sentAt})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.c.RPush(ctx, q.k.fin(old), queue.FinalShort(old)+rec).Err(); err != nil {
		t.Fatal(err)
	}
	out, err := q.ApplyReceipt(ctx, queue.Receipt{ProviderID: "y", Status: sms.StatusDelivered})
	if err != nil || out.Result != queue.ReceiptApplied || out.Message.ID != old {
		t.Fatalf("receipt for a day-old entry = %+v, %v", out, err)
	}
}

func mustIDTime(t *testing.T, id string) time.Time {
	t.Helper()
	at, ok := sms.IDTime(id)
	if !ok {
		t.Fatalf("id %q", id)
	}
	return at
}

// TestReceiptOnSentRecordInMsgs: a release before final records kept a
// sent message (with callbacks) in the msgs HASH. A receipt for it is
// applied there, and its event goes to the outbox, not onto the keys of
// the final records: the final LIST of the id's second (which other
// messages of that second use) stays a LIST, and a message of the same
// second still completes.
func TestReceiptOnSentRecordInMsgs(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newShared(t)
	created := time.Now().Add(-time.Hour).Truncate(time.Second)
	old, other := sms.NewID(created), sms.NewID(created.Add(time.Millisecond))
	value := fmt.Sprintf(`{"p":"p","c":0,"to":"+819012345678","b":"hello","g":1,"tc":%d,"tu":%d,"ts":%d,"s":"s","pm":"pm-old","w":true}`,
		created.UnixMilli(), created.UnixMilli(), created.UnixMilli())
	if err := q.c.HSet(ctx, q.k.msgs(), old, value).Err(); err != nil {
		t.Fatal(err)
	}
	out, err := q.ApplyReceipt(ctx, queue.Receipt{Reference: old, Status: sms.StatusDelivered})
	if err != nil || out.Result != queue.ReceiptApplied || out.Message.Status != sms.StatusDelivered {
		t.Fatalf("receipt for a sent record in msgs = %+v, %v", out, err)
	}
	if typ := q.c.Type(ctx, q.k.fin(old)).Val(); typ != "none" && typ != "list" {
		t.Fatalf("the final LIST key of the id's second is a %s", typ)
	}
	evs, err := q.ClaimEvents(ctx, "t", time.Hour, 10)
	if err != nil || len(evs) != 1 || evs[0].Event.MessageID != old || evs[0].Event.Status != sms.StatusDelivered {
		t.Fatalf("events = %v, %v; want old's delivered", evs, err)
	}
	seedStored(t, q, false, other, created.Add(time.Millisecond))
	l := takeHour(t, q)
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm-other", Attempts: 1}); err != nil {
		t.Fatalf("Complete of a message of the same second: %v", err)
	}
}

// TestDeadLettersPrunedByRecover: on an account where nothing completes
// (the provider down for good, say), Recover prunes dead letters past the
// retention, at most once per pruneEvery; the embedded store does the same
// from its Recover.
func TestDeadLettersPrunedByRecover(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := deadPruned(t, sms.ClassMarketing, "Recover", func(q *Queue) error {
		_, err := q.Recover(ctx)
		return err
	})
	// Within pruneEvery of the last prune, Recover does not prune again.
	for start := time.Now(); time.Since(start) < 2*q.retention; {
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := q.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if dl, err := q.DeadLetters(ctx, 10); err != nil || len(dl) != 1 {
		t.Fatalf("DeadLetters after a second Recover within a minute = %d, %v: want the young one kept", len(dl), err)
	}
}

// deadPruned makes an old and a young dead letter of class c on a queue
// of its own (oldAndYoungDead), runs prune (the call named by) and checks
// that it left only the young one; it returns the queue.
func deadPruned(t *testing.T, c sms.Class, by string, prune func(q *Queue) error) *Queue {
	t.Helper()
	q := newShared(t)
	old, young := oldAndYoungDead(t, q, c)
	if err := prune(q); err != nil {
		t.Fatalf("%s: %v", by, err)
	}
	onlyYoungDead(t, q, old, young, by)
	return q
}

// onlyYoungDead checks that after (the call that pruned) left young the
// only dead letter, old gone.
func onlyYoungDead(t *testing.T, q *Queue, old, young *sms.Message, after string) {
	t.Helper()
	if _, err := q.Get(t.Context(), old.ID); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("Get of a dead letter past the retention after %s: %v, want ErrNotFound", after, err)
	}
	dl, err := q.DeadLetters(t.Context(), 10)
	if err != nil || len(dl) != 1 || dl[0].ID != young.ID {
		t.Fatalf("DeadLetters after %s = %v, %v: want only %s", after, dl, err, young.ID)
	}
}

// oldAndYoungDead sets q's retention to 1.5 s and makes two dead letters
// of class c: old, past the retention, and young, within it.
func oldAndYoungDead(t *testing.T, q *Queue, c sms.Class) (old, young *sms.Message) {
	t.Helper()
	// Long enough that young stays within the retention while a busy
	// machine runs the caller's next steps.
	q.retention = 1500 * time.Millisecond
	old, young = msg("p", c), msg("p", c)
	enqueue(t, q, old)
	if err := q.Dead(t.Context(), takeHour(t, q), "gave up", 8); err != nil {
		t.Fatal(err)
	}
	// Wait for the state "old is past the retention" on the Redis clock.
	for start := time.Now(); time.Since(start) < q.retention+200*time.Millisecond; {
		time.Sleep(50 * time.Millisecond)
	}
	enqueue(t, q, young)
	if err := q.Dead(t.Context(), takeHour(t, q), "gave up", 8); err != nil {
		t.Fatal(err)
	}
	return old, young
}

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
