package redisq

import (
	"context"
	"slices"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
)

// checksFor are checks on test keys under q's prefix (so dump sees them):
// the suppression list, max_outstanding, an ingress GCRA of 1 a second with
// burst, and an answer key.
func checksFor(q *Queue, burst int64, answer string) queue.Checks {
	return queue.Checks{
		AnswerKey: q.k.tag + "t:answer", Answer: []byte(answer), AnswerTTL: time.Minute,
		SuppressionKey: q.k.tag + "t:sup", SuppressionID: "n1",
		MaxOutstanding: 2,
		IngressKey:     q.k.tag + "t:gcra", IngressInterval: 1_000_000, IngressBurst: burst, IngressCost: 1,
	}
}

func enqueueChecked(t *testing.T, q *Queue, m *sms.Message, ch queue.Checks) queue.CheckedResult {
	t.Helper()
	res, err := q.EnqueueChecked(context.Background(), []queue.Checked{{Message: m, Checks: ch}})
	if err != nil {
		t.Fatalf("EnqueueChecked: %v", err)
	}
	return res[0]
}

// TestEnqueueCheckedOrder: each check refuses in its turn, a refusal
// writes nothing at all (no GCRA charge, no count, no message, no answer),
// a stored message keeps its answer, and a stored answer is returned
// before any check runs.
func TestEnqueueCheckedOrder(t *testing.T) {
	t.Parallel()
	q := newShared(t)
	ctx := context.Background()

	// Suppressed: refused before max_outstanding and the GCRA.
	if err := q.c.HSet(ctx, q.k.tag+"t:sup", "n1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	before := dump(t, q)
	if r := enqueueChecked(t, q, smstest.Message("p", sms.ClassTransactional), checksFor(q, 5, "a1")); r.Refused != queue.RefusedSuppressed || r.Ingress {
		t.Fatalf("suppressed number: %+v", r)
	}
	if after := dump(t, q); !slices.Equal(before, after) {
		t.Fatalf("a suppressed refusal wrote:\n%v\nwas\n%v", after, before)
	}
	q.c.Del(ctx, q.k.tag+"t:sup")

	// Stored with its answer; a second request under the answer key gets
	// the answer back and stores nothing.
	ch := checksFor(q, 5, "a1")
	sent := smstest.Message("p", sms.ClassTransactional)
	first := enqueueChecked(t, q, sent, ch)
	if first.Refused != queue.NotRefused || first.Message == nil || first.Existed || !first.Ingress || first.Remaining != 4 {
		t.Fatalf("first: %+v", first)
	}
	// The stored message is the one passed in, as stored; it is in the
	// queue under its id.
	if first.Message.ID != sent.ID || first.Message.Status != sms.StatusQueued || first.Message.To != sent.To {
		t.Fatalf("first's message: %+v, sent %+v", first.Message, sent)
	}
	if got, err := q.Get(ctx, sent.ID); err != nil || got.Status != sms.StatusQueued || got.Body != sent.Body {
		t.Fatalf("first stored: %+v, %v", got, err)
	}
	before = dump(t, q)
	if r := enqueueChecked(t, q, smstest.Message("p", sms.ClassTransactional), checksFor(q, 5, "a2")); string(r.Replay) != "a1" || r.Ingress {
		t.Fatalf("replay: %+v", r)
	}
	if after := dump(t, q); !slices.Equal(before, after) {
		t.Fatalf("a replay wrote:\n%v\nwas\n%v", after, before)
	}

	// Without the answer key: the GCRA of burst 2 allows one more, then
	// refuses with a retry-after and writes nothing.
	ch = checksFor(q, 2, "")
	ch.AnswerKey = ""
	if r := enqueueChecked(t, q, smstest.Message("p", sms.ClassTransactional), ch); r.Refused != queue.NotRefused || r.Message == nil {
		t.Fatalf("second: %+v", r)
	}
	q.c.Del(ctx, q.k.tag+"t:gcra")
	ch.MaxOutstanding = 0
	ch.IngressBurst = 1
	if r := enqueueChecked(t, q, smstest.Message("p", sms.ClassTransactional), ch); r.Refused != queue.NotRefused {
		t.Fatalf("third: %+v", r)
	}
	before = dump(t, q)
	r := enqueueChecked(t, q, smstest.Message("p", sms.ClassTransactional), ch)
	if r.Refused != queue.RefusedIngress || r.RetryAfter <= 0 || r.RetryAfter > time.Second || r.Message != nil {
		t.Fatalf("over the GCRA: %+v", r)
	}
	if after := dump(t, q); !slices.Equal(before, after) {
		t.Fatalf("a GCRA refusal wrote:\n%v\nwas\n%v", after, before)
	}

	// Three outstanding, at most 2: refused with the count, before the
	// GCRA (which would refuse too, but is not charged or asked).
	ch.MaxOutstanding = 2
	r = enqueueChecked(t, q, smstest.Message("p", sms.ClassTransactional), ch)
	if r.Refused != queue.RefusedOutstanding || r.Outstanding != 3 || r.Ingress {
		t.Fatalf("over max_outstanding: %+v", r)
	}
	if after := dump(t, q); !slices.Equal(before, after) {
		t.Fatalf("an outstanding refusal wrote:\n%v\nwas\n%v", after, before)
	}
}

// TestEnqueueCheckedForeignKey: a check key outside the account's tag is
// refused for that message alone, before Redis is asked.
func TestEnqueueCheckedForeignKey(t *testing.T) {
	t.Parallel()
	q := newShared(t)
	ch := checksFor(q, 5, "")
	ch.IngressKey = "{smsgw:other}:ingress:p"
	res, err := q.EnqueueChecked(context.Background(), []queue.Checked{
		{Message: smstest.Message("p", sms.ClassTransactional), Checks: ch},
		{Message: smstest.Message("p", sms.ClassTransactional)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err == nil || res[1].Err != nil || res[1].Message == nil {
		t.Fatalf("results %+v", res)
	}
}
