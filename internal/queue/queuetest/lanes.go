package queuetest

import (
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// Sender lanes (queue.LaneOf, queue.LaneHolder, queue.LaneReader): a held
// sender's messages are passed over without being met one by one, the
// others leave in the order they would without lanes.
var laneCases = []testCase{
	{"lanes: a held sender's backlog does not block another sender", laneHeldSkipped},
	{"lanes: without holds the class leaves in enqueue order", laneOrder},
	{"lanes: a hold covers every class and keeps class order of the rest", laneClasses},
	{"lanes: a message put back keeps its place in its lane", laneKeepPlace},
	{"lanes: a hold never shortens and ends by itself", laneHoldEnds},
	{"lanes: the default sender's lane can be held", laneDefault},
	{"lanes: stats, scheduled, cancel and recover see every lane", laneReads},
	{"lanes: the backlog of each lane", laneBacklog},
}

const (
	slowSender  = "+15550000001"
	otherSender = "+15550000002"
)

func fromMsg(from string, c sms.Class) *sms.Message {
	m := newMsg("p", c)
	m.From = from
	return m
}

func hold(t *testing.T, q queue.Queue, lane string, d time.Duration) {
	t.Helper()
	if err := facet[queue.LaneHolder](t, q).HoldLane(t.Context(), lane, d); err != nil {
		t.Fatalf("HoldLane: %v", err)
	}
}

func wantTaken(t *testing.T, l *queue.Leased, want *sms.Message) {
	t.Helper()
	if l.Message.ID != want.ID {
		t.Fatalf("took %s (from %q), want %s (from %q)", l.Message.ID, l.Message.From, want.ID, want.From)
	}
}

func laneHeldSkipped(t *testing.T, h Harness) {
	q := h.New(t)
	var slow []*sms.Message
	for range 20 {
		slow = append(slow, fromMsg(slowSender, sms.ClassMarketing))
	}
	mustEnqueue(t, q, slow...)
	other := fromMsg(otherSender, sms.ClassMarketing)
	mustEnqueue(t, q, other)
	hold(t, q, slowSender, time.Hour)
	wantTaken(t, mustTake(t, q, opts()), other)
	wait := mustEmpty(t, q, opts())
	if wait < 50*time.Minute || wait > time.Hour+slack {
		t.Fatalf("wait %v while the only lane with messages is held for an hour", wait)
	}
	if st := stats(t, q)[sms.ClassMarketing]; st.Ready != 20 {
		t.Fatalf("Ready %d, want the 20 messages of the held lane", st.Ready)
	}
	if ls, err := q.TakeMore(t.Context(), opts(), 10, 10); err != nil || len(ls) != 0 {
		t.Fatalf("TakeMore = %d, %v: want none while the lane is held", len(ls), err)
	}
}

func laneOrder(t *testing.T, h Harness) {
	q := h.New(t)
	var in []*sms.Message
	for i, from := range []string{slowSender, otherSender, slowSender, "", otherSender, slowSender, "+15550000003", ""} {
		m := fromMsg(from, sms.ClassTransactional)
		m.Body = string(rune('a' + i))
		in = append(in, m)
	}
	mustEnqueue(t, q, in[:3]...)
	// the rest in one batch: one instant of the backend's clock
	if _, err := q.EnqueueMany(t.Context(), in[3:]); err != nil {
		t.Fatalf("EnqueueMany: %v", err)
	}
	ls, err := q.TakeMore(t.Context(), opts(), 3, 100)
	if err != nil || len(ls) != 3 {
		t.Fatalf("TakeMore = %d, %v: want 3", len(ls), err)
	}
	for i := range 3 {
		wantTaken(t, ls[i], in[i])
	}
	for _, m := range in[3:] {
		wantTaken(t, mustTake(t, q, opts()), m)
	}
	mustEmpty(t, q, opts())
}

func laneClasses(t *testing.T, h Harness) {
	q := h.New(t)
	slowMkt := fromMsg(slowSender, sms.ClassMarketing)
	slowOTP := fromMsg(slowSender, sms.ClassOTP)
	otherMkt := fromMsg(otherSender, sms.ClassMarketing)
	otherTx := fromMsg(otherSender, sms.ClassTransactional)
	mustEnqueue(t, q, slowMkt, otherMkt, slowOTP, otherTx)
	hold(t, q, slowSender, time.Hour)
	wantTaken(t, mustTake(t, q, opts()), otherTx)
	wantTaken(t, mustTake(t, q, opts()), otherMkt)
	mustEmpty(t, q, opts())
	// a shorter hold does not shorten it; a hold of another lane does not
	// touch it
	hold(t, q, slowSender, time.Millisecond)
	hold(t, q, otherSender, time.Hour)
	mustEmpty(t, q, opts(sms.ClassOTP))
}

func laneKeepPlace(t *testing.T, h Harness) {
	q := h.New(t)
	a, b := fromMsg(slowSender, sms.ClassMarketing), fromMsg(slowSender, sms.ClassMarketing)
	other := fromMsg(otherSender, sms.ClassMarketing)
	mustEnqueue(t, q, a, b, other)
	l := mustTake(t, q, opts())
	wantTaken(t, l, a)
	hold(t, q, slowSender, time.Hour)
	if err := q.Requeue(t.Context(), l, queue.RequeueOptions{KeepPlace: true}); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	wantTaken(t, mustTake(t, q, opts()), other)
	mustEmpty(t, q, opts())
	if got := wantStatus(t, q, a.ID, sms.StatusQueued); got.Attempts != 0 {
		t.Fatalf("attempts %d after a put back, want 0", got.Attempts)
	}
}

func laneHoldEnds(t *testing.T, h Harness) {
	q := h.New(t)
	a, b := fromMsg(slowSender, sms.ClassOTP), fromMsg(slowSender, sms.ClassOTP)
	mustEnqueue(t, q, a, b)
	hold(t, q, slowSender, 300*time.Millisecond)
	hold(t, q, slowSender, time.Millisecond) // never shortens
	start := time.Now()
	l := takeWhenDue(t, q, opts(), start.Add(250*time.Millisecond))
	wantTaken(t, l, a)
	wantTaken(t, mustTake(t, q, opts()), b)
}

func laneDefault(t *testing.T, h Harness) {
	q := h.New(t)
	def := fromMsg("", sms.ClassTransactional)
	other := fromMsg(otherSender, sms.ClassTransactional)
	mustEnqueue(t, q, def, other)
	hold(t, q, "", time.Hour)
	wantTaken(t, mustTake(t, q, opts()), other)
	mustEmpty(t, q, opts())
}

func laneReads(t *testing.T, h Harness) {
	q := h.New(t)
	ctx := t.Context()
	a, b := fromMsg(slowSender, sms.ClassMarketing), fromMsg(otherSender, sms.ClassMarketing)
	later := fromMsg(otherSender, sms.ClassMarketing)
	later.NotBefore = time.Now().Add(time.Hour)
	c := fromMsg(slowSender, sms.ClassMarketing)
	mustEnqueue(t, q, a, b, later, c)
	st := stats(t, q)[sms.ClassMarketing]
	if st.Ready != 3 || st.Scheduled != 1 || st.OldestAge <= 0 {
		t.Fatalf("stats %+v: want 3 ready of two lanes, 1 scheduled", st)
	}
	sw, err := q.ScheduledWithin(ctx, []time.Duration{2 * time.Hour})
	if err != nil || sw[sms.ClassMarketing][0] != 1 {
		t.Fatalf("ScheduledWithin = %v, %v: want 1 marketing", sw, err)
	}
	if _, err := q.Cancel(ctx, c.ID, c.Producer); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	l := mustTake(t, q, opts())
	wantTaken(t, l, a)
	// recovered, a's message goes back to its lane's head, held or not
	rq := queue.TakeOptions{Owner: "short", Lease: time.Millisecond}
	if err := q.Requeue(ctx, l, queue.RequeueOptions{KeepPlace: true}); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	l = mustTake(t, q, rq)
	wantTaken(t, l, a)
	recoverAll(t, q, 1)
	hold(t, q, slowSender, time.Hour)
	wantTaken(t, mustTake(t, q, opts()), b)
	mustEmpty(t, q, opts())
	if got := outstanding(t, q, "p"); got != 3 {
		t.Fatalf("outstanding %d, want 3 (a, b leased and the scheduled one)", got)
	}
	if _, err := q.Cancel(ctx, a.ID, a.Producer); err != nil {
		t.Fatalf("Cancel of a held lane's message: %v", err)
	}
	if st := stats(t, q)[sms.ClassMarketing]; st.Ready != 0 || st.Scheduled != 1 {
		t.Fatalf("stats %+v after the cancel: want none ready, 1 scheduled", st)
	}
}

func laneBacklog(t *testing.T, h Harness) {
	q := h.New(t)
	mustEnqueue(t, q, fromMsg(slowSender, sms.ClassMarketing), fromMsg(slowSender, sms.ClassMarketing),
		fromMsg(slowSender, sms.ClassOTP), fromMsg(otherSender, sms.ClassTransactional), fromMsg("", sms.ClassMarketing))
	hold(t, q, slowSender, time.Hour)
	ls, err := facet[queue.LaneReader](t, q).Lanes(t.Context())
	if err != nil {
		t.Fatalf("Lanes: %v", err)
	}
	got := map[string]queue.LaneStats{}
	for _, l := range ls {
		if _, dup := got[l.Lane]; dup {
			t.Fatalf("lane %q listed twice", l.Lane)
		}
		got[l.Lane] = l
	}
	if len(got) != 3 {
		t.Fatalf("lanes %+v: want 3", ls)
	}
	slow := got[slowSender]
	if slow.Queued[sms.ClassMarketing] != 2 || slow.Queued[sms.ClassOTP] != 1 || slow.HeldFor < 50*time.Minute {
		t.Fatalf("slow lane %+v: want 2 marketing, 1 otp, held about an hour", slow)
	}
	if o := got[otherSender]; o.Queued[sms.ClassTransactional] != 1 || o.HeldFor != 0 {
		t.Fatalf("other lane %+v", o)
	}
	if d := got[""]; d.Queued[sms.ClassMarketing] != 1 {
		t.Fatalf("default lane %+v", d)
	}
}
