package redisq

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/queue/queuetest"
	"smsgw/internal/sms"
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
