package queuetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"smsgw/internal/queue"
)

// Replies (queue.Routes), on every backend:
//   - Route returns the producer of the first key that has one, with its
//     index; the latest RememberRoute of a key wins; a key never
//     remembered has none;
//   - AddReply writes one message.received event (Reply set, Status
//     StatusReceived, id ReplyEventID, no CallbackURL) that is claimed,
//     retried, given up and retried from the dead list like any other;
//     a second AddReply of the same id, also after the first was
//     delivered, or from several clients at once, writes nothing more;
//   - the routes and the events survive a reopen.

func reply(id string) queue.Reply {
	return queue.Reply{ID: id, From: "+819012345678", To: "+15550001111", Text: "yes, 3 pm — ok ✓",
		At: time.Now().Add(-time.Minute).Truncate(time.Millisecond).UTC()}
}

func wantRoute(t *testing.T, r queue.Routes, keys []string, producer string, index int) {
	t.Helper()
	p, i, err := r.Route(t.Context(), keys)
	if err != nil || p != producer || i != index {
		t.Fatalf("Route(%v) = %q, %d, %v; want %q, %d", keys, p, i, err, producer, index)
	}
}

func testRoutesLatestSenderWins(t *testing.T, h Harness) {
	r := facet[queue.Routes](t, h.New(t))
	ctx := t.Context()
	wantRoute(t, r, []string{"k1", "k2"}, "", -1)
	for _, kp := range [][2]string{{"k1", "alerts"}, {"k2", "shop"}, {"k1", "shop"}} {
		if err := r.RememberRoute(ctx, kp[0], kp[1]); err != nil {
			t.Fatalf("RememberRoute(%s, %s): %v", kp[0], kp[1], err)
		}
	}
	wantRoute(t, r, []string{"k1"}, "shop", 0)
	wantRoute(t, r, []string{"none", "k2", "k1"}, "shop", 1)
	wantRoute(t, r, []string{"none"}, "", -1)
	if err := r.RememberRoute(ctx, "", "shop"); !errors.Is(err, queue.ErrReplyInvalid) {
		t.Fatalf("RememberRoute with an empty key = %v, want ErrReplyInvalid", err)
	}
}

func testReplyOneEventPerID(t *testing.T, h Harness) {
	q := h.New(t)
	r, o := facet[queue.Routes](t, q), outbox(t, q)
	want := reply("rcv_one")
	clients := []queue.Queue{q}
	if h.MultiClient != nil {
		clients = append(clients, h.MultiClient(t, q, 3)...)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		added int
	)
	for _, c := range clients {
		for range 4 {
			wg.Go(func() {
				ok, err := facet[queue.Routes](t, c).AddReply(t.Context(), "shop", want)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("AddReply: %v", err)
				}
				if ok {
					added++
				}
			})
		}
	}
	wg.Wait()
	if added != 1 {
		t.Fatalf("%d of %d concurrent AddReply calls of one id wrote an event, want 1", added, 4*len(clients))
	}
	wantOutbox(t, o, 1, 0)
	le := claimAll(t, o, "t", time.Hour)
	if len(le) != 1 {
		t.Fatalf("claimed %d events, want 1", len(le))
	}
	ev := le[0].Event
	if ev.ID != queue.ReplyEventID(want.ID) || ev.Type() != "message.received" || ev.Status != queue.StatusReceived ||
		ev.Producer != "shop" || ev.CallbackURL != "" || ev.MessageID != want.ID || ev.Reply == nil {
		t.Fatalf("event %+v, want a message.received event %s of producer shop", ev, queue.ReplyEventID(want.ID))
	}
	if got := *ev.Reply; got.ID != want.ID || got.From != want.From || got.To != want.To || got.Text != want.Text || !got.At.Equal(want.At) {
		t.Fatalf("reply %+v, want %+v", got, want)
	}
	ack(t, o, le[0]) // delivered: the id is still remembered
	if ok, err := r.AddReply(t.Context(), "shop", want); ok || err != nil {
		t.Fatalf("AddReply after delivery = %v, %v; want false, nil", ok, err)
	}
	wantOutbox(t, o, 0, 0)
	if ok, err := r.AddReply(t.Context(), "shop", reply("rcv_two")); !ok || err != nil {
		t.Fatalf("AddReply of another id = %v, %v; want true", ok, err)
	}
	if _, err := r.AddReply(t.Context(), "shop", queue.Reply{ID: "rcv_x", At: time.Now()}); !errors.Is(err, queue.ErrReplyInvalid) {
		t.Fatalf("AddReply without a sender = %v, want ErrReplyInvalid", err)
	}
}

func testReplyDeadAndRetried(t *testing.T, h Harness) {
	q := h.New(t)
	r, o := facet[queue.Routes](t, q), outbox(t, q)
	want := reply("rcv_dead")
	if ok, err := r.AddReply(t.Context(), "shop", want); !ok || err != nil {
		t.Fatalf("AddReply = %v, %v", ok, err)
	}
	le := claimAll(t, o, "a", time.Hour)
	if len(le) != 1 {
		t.Fatalf("claimed %d, want 1", len(le))
	}
	// its max age counts from when it was written, not the vendor's time
	if dead, err := o.RetryEvent(t.Context(), le[0], queue.EventRetry{After: time.Second, SpendAttempt: true,
		LastError: "HTTP 500", MaxAge: time.Hour}); dead || err != nil {
		t.Fatalf("RetryEvent within its max age = dead %v, %v", dead, err)
	}
	wantOutbox(t, o, 1, 0)
	deadline := time.Now().Add(patience)
	for le = nil; len(le) == 0 && time.Now().Before(deadline); {
		le = claimAll(t, o, "b", time.Hour)
	}
	if len(le) != 1 {
		t.Fatal("the retried reply never fell due")
	}
	if dead, err := o.RetryEvent(t.Context(), le[0], queue.EventRetry{After: time.Hour, SpendAttempt: true,
		LastError: "HTTP 500", MaxAge: time.Second}); !dead || err != nil {
		t.Fatalf("RetryEvent past its max age = dead %v, %v; want dead", dead, err)
	}
	wantOutbox(t, o, 0, 1)
	dl, err := o.DeadEvents(t.Context(), 10)
	if err != nil || len(dl) != 1 || dl[0].Reply == nil || dl[0].ID != queue.ReplyEventID(want.ID) || dl[0].Attempts != 2 {
		t.Fatalf("DeadEvents = %v, %v; want the reply, 2 attempts", dl, err)
	}
	if err := o.RetryDeadEvent(t.Context(), dl[0].ID); err != nil {
		t.Fatalf("RetryDeadEvent: %v", err)
	}
	ev := onlyEvent(t, o)
	if ev.Reply == nil || ev.Reply.Text != want.Text {
		t.Fatalf("retried event %+v, want the same reply", ev)
	}
}

func testRepliesDurable(t *testing.T, h Harness) {
	if h.Reopen == nil {
		t.Skip("no Reopen")
	}
	q := h.New(t)
	if err := facet[queue.Routes](t, q).RememberRoute(t.Context(), "kd", "alerts"); err != nil {
		t.Fatal(err)
	}
	if ok, err := facet[queue.Routes](t, q).AddReply(t.Context(), "alerts", reply("rcv_durable")); !ok || err != nil {
		t.Fatalf("AddReply = %v, %v", ok, err)
	}
	q = h.Reopen(t, q)
	wantRoute(t, facet[queue.Routes](t, q), []string{"kd"}, "alerts", 0)
	if ev := onlyEvent(t, outbox(t, q)); ev.Reply == nil || ev.ID != queue.ReplyEventID("rcv_durable") {
		t.Fatalf("event after reopening %+v, want the reply", ev)
	}
	if ok, err := facet[queue.Routes](t, q).AddReply(t.Context(), "alerts", reply("rcv_durable")); ok || err != nil {
		t.Fatalf("AddReply after reopening = %v, %v; want false", ok, err)
	}
}
