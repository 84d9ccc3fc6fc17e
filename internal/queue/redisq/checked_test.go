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

// TestEnqueueCheckedBatchState: one script run over a batch keeps the
// sequence counter, the producers' outstanding counts and the ingress TATs
// itself and writes each once at its end; every message must still see
// the ones before it, and the keys must end as one run per message would
// leave them. Messages are passed against their id order, so the take
// order shows the sequence numbers were handed out in batch order.
// Mutations this catches (enqueueScript): not keeping t.tat after an allow
// (the third "p" message passes its burst), not counting adds in
// outstanding() (the second "r" message passes max_outstanding), dropping
// the INCRBY of the sequence, or the end-of-run HINCRBY / gcra_set.
func TestEnqueueCheckedBatchState(t *testing.T) {
	t.Parallel()
	q := newShared(t)
	ctx := context.Background()
	enqueue(t, q, msg("r", sms.ClassMarketing)) // r has one outstanding
	seq0, err := q.c.Get(ctx, q.k.seq()).Int64()
	if err != nil {
		t.Fatal(err)
	}
	ingress := queue.Checks{IngressKey: q.k.tag + "t:gcra:p", IngressInterval: 1_000_000, IngressBurst: 2, IngressCost: 1}
	most := queue.Checks{MaxOutstanding: 2}
	ms := make([]*sms.Message, 6)
	for i := range ms {
		p := "p"
		if i >= 3 {
			p = "r"
		}
		ms[i] = msg(p, sms.ClassMarketing)
	}
	// Batch order: p2 p1 p0 r5 r4 r3 (ids ascend p0 … r5).
	var cs []queue.Checked
	for i := len(ms) - 1; i >= 0; i-- {
		ch := most
		if ms[i].Producer == "p" {
			ch = ingress
		}
		cs = append(cs, queue.Checked{Message: ms[i], Checks: ch})
	}
	cs[0], cs[1], cs[2], cs[3], cs[4], cs[5] = cs[3], cs[4], cs[5], cs[0], cs[1], cs[2]
	res, err := q.EnqueueChecked(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	want := []queue.Refusal{queue.NotRefused, queue.NotRefused, queue.RefusedIngress, queue.NotRefused, queue.RefusedOutstanding, queue.RefusedOutstanding}
	for i, r := range res {
		if r.Err != nil || r.Refused != want[i] {
			t.Fatalf("message %d (%s): refused %v, err %v; want %v", i, cs[i].Message.Producer, r.Refused, r.Err, want[i])
		}
	}
	if res[1].Remaining != 0 || res[0].Remaining != 1 {
		t.Fatalf("ingress remaining %d then %d, want 1 then 0", res[0].Remaining, res[1].Remaining)
	}
	if res[4].Outstanding != 2 || res[5].Outstanding != 2 {
		t.Fatalf("outstanding counts %d, %d; want 2, 2", res[4].Outstanding, res[5].Outstanding)
	}
	// The keys as one run per message would leave them.
	if n, _ := q.c.Get(ctx, q.k.seq()).Int64(); n != seq0+3 {
		t.Fatalf("sequence %d, want %d (three stored)", n, seq0+3)
	}
	if n, _ := q.c.HGet(ctx, q.k.outstanding(), "p").Int64(); n != 2 {
		t.Fatalf("p outstanding %d, want 2", n)
	}
	if n, _ := q.c.HGet(ctx, q.k.outstanding(), "r").Int64(); n != 2 {
		t.Fatalf("r outstanding %d, want 2", n)
	}
	tat, err := q.c.Get(ctx, ingress.IngressKey).Int64()
	if err != nil {
		t.Fatalf("ingress TAT: %v", err)
	}
	now, err := q.c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ahead := time.Duration(tat-now.UnixMicro()) * time.Microsecond; ahead <= time.Second || ahead > 2*time.Second {
		t.Fatalf("ingress TAT %v ahead of now, want two intervals (just under 2s)", ahead)
	}
	if ttl := q.c.PTTL(ctx, ingress.IngressKey).Val(); ttl <= time.Second || ttl > 2100*time.Millisecond {
		t.Fatalf("ingress key expires in %v, want when the TAT is reached", ttl)
	}
	// Stored records read back whole, and are taken in batch order after
	// the older r: p2, p1 (p0 was refused), r5.
	for _, i := range []int{2, 1, 5} {
		got, err := q.Get(ctx, ms[i].ID)
		if err != nil || got.Status != sms.StatusQueued || got.Body != ms[i].Body || got.CreatedAt.IsZero() || got.UpdatedAt.IsZero() {
			t.Fatalf("stored %d: %+v, %v", i, got, err)
		}
	}
	var order []string
	for range 4 {
		l := take(t, q, time.Minute)
		order = append(order, l.Message.ID)
	}
	if order[1] != ms[2].ID || order[2] != ms[1].ID || order[3] != ms[5].ID {
		t.Fatalf("taken %v; want the older r, then %s %s %s", order, ms[2].ID, ms[1].ID, ms[5].ID)
	}
}

// TestEnqueueCheckedIngressClockStepBack: an ingress TAT an hour ahead, as
// Redis's clock stepping back an hour leaves it, refuses the producer for
// one interval, not the hour: the enqueue script reads the TAT through
// gcra_reach (now + burst·interval at most) and stores the lowered value
// although it refused, so the next try one retry-after later passes. It
// catches the script not marking a lowered TAT dirty (t.dirty = false: the
// second try is refused again) and not lowering it at all (an hour's
// retry-after).
func TestEnqueueCheckedIngressClockStepBack(t *testing.T) {
	t.Parallel()
	q := newShared(t)
	ctx := context.Background()
	const interval = 100 * time.Millisecond
	ch := queue.Checks{IngressKey: q.k.tag + "t:gcra:p", IngressInterval: interval.Microseconds(), IngressBurst: 2, IngressCost: 1}
	now, err := q.c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.c.Set(ctx, ch.IngressKey, now.Add(time.Hour).UnixMicro(), 2*time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	r := enqueueChecked(t, q, smstest.Message("p", sms.ClassTransactional), ch)
	if r.Refused != queue.RefusedIngress || r.RetryAfter <= 0 || r.RetryAfter > interval || r.Message != nil {
		t.Fatalf("after the step: %+v, want refused for at most one interval (%s)", r, interval)
	}
	tat, err := q.c.Get(ctx, ch.IngressKey).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if ahead := time.Duration(tat-now.UnixMicro()) * time.Microsecond; ahead > time.Second {
		t.Fatalf("the refusal left the TAT %s ahead, want it lowered to two intervals", ahead)
	}
	time.Sleep(r.RetryAfter)
	if r := enqueueChecked(t, q, smstest.Message("p", sms.ClassTransactional), ch); r.Refused != queue.NotRefused || r.Message == nil {
		t.Fatalf("one retry-after later: %+v", r)
	}
}

// TestEnqueueCheckedKeyed: the keyed-request GCRA runs right after the
// replay: over it a message is refused with the keyed GCRA's retry-after
// and nothing is written, while a stored answer is still returned; a unit
// it grants stays spent when a later check refuses.
func TestEnqueueCheckedKeyed(t *testing.T) {
	t.Parallel()
	q := newShared(t)
	keyed := func(answer string) queue.Checks {
		ch := checksFor(q, 5, answer)
		ch.KeyedKey, ch.KeyedInterval, ch.KeyedBurst = q.k.tag+"t:keyed", time.Hour.Microseconds(), 2
		return ch
	}
	if r := enqueueChecked(t, q, smstest.Message("p", sms.ClassTransactional), keyed("a1")); r.Refused != queue.NotRefused || r.Message == nil {
		t.Fatalf("first keyed: %+v", r)
	}
	// max_outstanding refuses after the keyed GCRA granted: its unit is spent.
	ch := keyed("")
	ch.AnswerKey = ""
	ch.MaxOutstanding = 1
	if r := enqueueChecked(t, q, smstest.Message("p", sms.ClassTransactional), ch); r.Refused != queue.RefusedOutstanding {
		t.Fatalf("over max_outstanding: %+v", r)
	}
	ch.MaxOutstanding = 0
	before := dump(t, q)
	r := enqueueChecked(t, q, smstest.Message("p", sms.ClassTransactional), ch)
	if r.Refused != queue.RefusedKeyed || r.Ingress || r.RetryAfter <= 30*time.Minute || r.RetryAfter > time.Hour || r.Message != nil {
		t.Fatalf("over the keyed GCRA: %+v", r)
	}
	if after := dump(t, q); !slices.Equal(before, after) {
		t.Fatalf("a keyed refusal wrote:\n%v\nwas\n%v", after, before)
	}
	if r := enqueueChecked(t, q, smstest.Message("p", sms.ClassTransactional), keyed("a2")); string(r.Replay) != "a1" {
		t.Fatalf("replay over the keyed GCRA: %+v", r)
	}
}
