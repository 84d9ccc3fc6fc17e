package redisq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
)

// listedMsg is a marketing message whose number's id is id.
func listedMsg(id string) *sms.Message {
	m := smstest.Message("p", sms.ClassMarketing)
	m.NumberID = id
	return m
}

// TestTakeListedRoundTrips: the take reads the suppression list inside its
// script, so a take that finds no listed message costs the one round trip
// it cost before the list was read; one that ends listed messages costs
// one more, a single pipeline of completion scripts, however many it
// ended (up to queue.MaxSuppressedPerTake).
func TestTakeListedRoundTrips(t *testing.T) {
	t.Parallel()
	producer := newShared(t)
	s, add := redisSuppressions(t, producer)
	s.Ended = func(*sms.Message) {}
	c := newClient(t, redistest.Addr(t))
	hook := &redistest.RoundTrips{}
	c.AddHook(hook)
	q := open(t, c, producer.account)
	o := queue.TakeOptions{Owner: "t", Lease: time.Hour, Suppression: &s}
	ctx := t.Context()

	// Every script loaded first (Redis keeps them): a NOSCRIPT retry
	// would count as a round trip of its own.
	warm := listedMsg("warm0123456789abcdef0123456789ab")
	add(warm.NumberID)
	enqueue(t, producer, warm, listedMsg("free0123456789abcdef0123456789ab"))
	if _, _, err := q.Take(ctx, o); err != nil {
		t.Fatal(err)
	}

	enqueue(t, producer, listedMsg("free1123456789abcdef0123456789ab"))
	before := hook.N()
	if _, _, err := q.Take(ctx, o); err != nil {
		t.Fatal(err)
	}
	if n := hook.N() - before; n != 1 {
		t.Fatalf("a take that found nothing listed: %d round trips, want 1", n)
	}

	listed := "list0123456789abcdef0123456789ab"
	add(listed)
	var ms []*sms.Message
	for range 5 {
		ms = append(ms, listedMsg(listed))
	}
	last := listedMsg("free2123456789abcdef0123456789ab")
	enqueue(t, producer, append(ms, last)...)
	before = hook.N()
	l, _, err := q.Take(ctx, o)
	if err != nil || l.Message.ID != last.ID {
		t.Fatalf("Take = %v, %v; want %s", l, err, last.ID)
	}
	if n := hook.N() - before; n != 2 {
		t.Fatalf("a take that ended 5 listed messages: %d round trips, want 2", n)
	}
	for _, m := range ms {
		if got, err := q.Get(ctx, m.ID); err != nil || got.Status != sms.StatusSuppressed {
			t.Fatalf("Get %s = %+v, %v; want suppressed", m.ID, got, err)
		}
	}
}

// TestTakeListedScriptFlushed: a Redis that does not hold the completion
// script (a fresh or flushed server) still ends the listed messages a take
// found: the pipeline's NOSCRIPT answers are run again with the script.
func TestTakeListedScriptFlushed(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	c := newClient(t, srv.Addr)
	q := open(t, c, redistest.Prefix(t))
	s, add := redisSuppressions(t, q)
	var ended []string
	s.Ended = func(m *sms.Message) { ended = append(ended, m.ID) }
	listed := "list0123456789abcdef0123456789ab"
	add(listed)
	a, b := listedMsg(listed), listedMsg(listed)
	enqueue(t, q, a, b)
	if err := c.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.Take(t.Context(), queue.TakeOptions{Owner: "t", Lease: time.Hour, Suppression: &s}); !errors.Is(err, queue.ErrEmpty) {
		t.Fatalf("Take: %v, want ErrEmpty", err)
	}
	if fmt.Sprint(ended) != fmt.Sprint([]string{a.ID, b.ID}) {
		t.Fatalf("ended %v, want %s and %s", ended, a.ID, b.ID)
	}
	for _, m := range []*sms.Message{a, b} {
		if got, err := q.Get(t.Context(), m.ID); err != nil || got.Status != sms.StatusSuppressed || got.LastError != queue.ListedReason {
			t.Fatalf("Get %s = %+v, %v; want suppressed", m.ID, got, err)
		}
	}
}

// TestTakeListedKeyOutsideAccount: a suppression key of another hash tag
// is refused before Redis is asked (on a Cluster it would be CROSSSLOT,
// and another account's list is not this queue's to read).
func TestTakeListedKeyOutsideAccount(t *testing.T) {
	t.Parallel()
	q := newShared(t)
	enqueue(t, q, listedMsg("list0123456789abcdef0123456789ab"))
	s := queue.Suppression{Key: "{smsgw:other}:protect:suppressed"}
	_, _, err := q.Take(t.Context(), queue.TakeOptions{Owner: "t", Lease: time.Hour, Suppression: &s})
	if err == nil || !strings.Contains(err.Error(), "hash tag") {
		t.Fatalf("Take with another account's list: %v", err)
	}
	if st, err := q.Stats(t.Context()); err != nil || st[sms.ClassMarketing].Ready != 1 {
		t.Fatalf("Stats = %+v, %v; want the message still queued", st, err)
	}
}

// beforePipeline is a go-redis hook that runs fn once, before the first
// pipeline of scripts the client sends: for a take that found listed
// messages, the moment between the take script and the completions that
// end them.
type beforePipeline struct {
	fn   func()
	done bool
}

func (h *beforePipeline) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *beforePipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *beforePipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.done && len(cmds) > 0 && strings.HasPrefix(strings.ToLower(cmds[0].Name()), "eval") {
			h.done = true
			h.fn()
		}
		return next(ctx, cmds)
	}
}

// TestTakeListedReceiptInWindow: a message whose earlier attempt reached
// the provider (its outcome was unknown) is never ended suppressed once
// its receipt is parked on it: the provider has it, and the receipt
// decides (queue.Suppression). The take script leases it as listed (no
// receipt yet); the receipt arrives before the completion that would end
// it runs (one round trip later) and is parked on the leased message. The
// take must not drop that receipt by ending the message suppressed: it
// hands the message out with its receipt, as it would have had the
// receipt come a moment earlier, and Ended hears of nothing.
func TestTakeListedReceiptInWindow(t *testing.T) {
	t.Parallel()
	producer := newShared(t)
	s, add := redisSuppressions(t, producer)
	var ended []string
	s.Ended = func(m *sms.Message) { ended = append(ended, m.ID) }
	ctx := t.Context()
	listed := "list0123456789abcdef0123456789ab"
	m := listedMsg(listed)
	enqueue(t, producer, m)
	first := take(t, producer, time.Hour)
	if err := producer.Requeue(ctx, first, queue.RequeueOptions{SpendAttempt: true, LastError: "timeout"}); err != nil {
		t.Fatal(err)
	}
	add(listed)

	c := newClient(t, redistest.Addr(t))
	c.AddHook(&beforePipeline{fn: func() {
		out, err := producer.ApplyReceipt(ctx, queue.Receipt{Reference: m.ID, Status: sms.StatusDelivered})
		if err != nil || out.Result != queue.ReceiptParked {
			t.Errorf("receipt in the window: %+v, %v; want parked", out, err)
		}
	}})
	q := open(t, c, producer.account)
	l, _, err := q.Take(ctx, queue.TakeOptions{Owner: "t", Lease: time.Hour, Suppression: &s})
	if got, gerr := q.Get(ctx, m.ID); gerr != nil || got.Status == sms.StatusSuppressed {
		t.Fatalf("after the take: %+v, %v; a message with a parked receipt was ended suppressed, its receipt dropped", got, gerr)
	}
	if err != nil || l.Message.ID != m.ID || l.Receipt != sms.StatusDelivered {
		t.Fatalf("Take = %+v, %v; want %s with its parked receipt", l, err, m.ID)
	}
	if len(ended) != 0 {
		t.Fatalf("Ended heard of %v", ended)
	}
}
