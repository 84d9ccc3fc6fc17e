package redisq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
)

var _ queue.Notifier = (*Queue)(nil)

// listener collects the classes a Listen delivers.
type listener struct {
	mu   sync.Mutex
	got  []sms.Class
	news chan struct{}
	done chan struct{}
	stop context.CancelFunc
}

// always is a ready that never waits: a process with an idle lane.
func always(ctx context.Context, _ bool) bool { return ctx.Err() == nil }

func listen(t *testing.T, q *Queue) *listener { return listenWhen(t, q, always) }

func listenWhen(t *testing.T, q *Queue, ready func(context.Context, bool) bool) *listener {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &listener{news: make(chan struct{}, 1), done: make(chan struct{}), stop: cancel}
	go func() {
		defer close(l.done)
		q.Listen(ctx, func(c sms.Class) bool {
			l.mu.Lock()
			l.got = append(l.got, c)
			l.mu.Unlock()
			select {
			case l.news <- struct{}{}:
			default:
			}
			return true
		}, ready)
	}()
	t.Cleanup(func() { cancel(); <-l.done })
	return l
}

// waitFor waits until the listener has received want after its first n
// wake-ups, and returns the count up to and including that one: a
// wake-up that arrived after it is still there for the next waitFor.
// (Returning the count at the time read past it: a busy listener's token
// handed on could land with the start wake-ups and never be waited for.)
func (l *listener) waitFor(t *testing.T, from int, want sms.Class) int {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		l.mu.Lock()
		got := append([]sms.Class(nil), l.got...)
		l.mu.Unlock()
		for i := from; i < len(got); i++ {
			if got[i] == want {
				return i + 1
			}
		}
		select {
		case <-l.news:
		case <-deadline:
			t.Fatalf("no wake-up for %s after the first %d (got %v)", want, from, got)
		}
	}
}

// testWake: a queue of another process enqueues; the listener hears the
// class (after the wake-up of every class that a listener starts with).
func testWake(t *testing.T, listenOn, enqueueOn *Queue) {
	l := listen(t, listenOn)
	n := l.waitFor(t, 0, sms.ClassMarketing) // subscribed: every class once
	enqueue(t, enqueueOn, msg("p", sms.ClassOTP))
	n = l.waitFor(t, n, sms.ClassOTP)
	enqueue(t, enqueueOn, msg("p", sms.ClassMarketing), msg("p", sms.ClassTransactional))
	l.waitFor(t, n, sms.ClassTransactional)
}

func TestWakeUpOnEnqueue(t *testing.T) {
	a := newShared(t)
	b := open(t, redistest.Client(t), a.account)
	testWake(t, a, b)
}

// A Redis Cluster: the wake LIST lives on the account's slot and the token
// rides the enqueue's pipeline to that node.
func TestWakeUpOnEnqueueCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	addrs := redistest.StartCluster(t)
	acct := redistest.Prefix(t)
	a := open(t, redistest.ClusterClient(t, addrs), acct)
	b := open(t, redistest.ClusterClient(t, addrs), acct)
	testWake(t, a, b)
}

// A wake-up lost while Redis was away is made good by the wake-up of
// every class that the listener gives once Redis answers again.
func TestWakeUpAfterReconnect(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	c := clientWith(t, redis.Options{Addr: srv.Addr, MaxRetries: -1})
	q := open(t, c, redistest.Prefix(t))
	l := listen(t, q)
	n := l.waitFor(t, 0, sms.ClassMarketing)
	waitBlocked(t, c, 1) // the pop the kill cuts
	srv.Kill()
	srv.Start()
	l.waitFor(t, n, sms.ClassMarketing)
}

// count is how many wake-ups the listener has had.
func (l *listener) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.got)
}

// blockedClients is INFO clients' blocked_clients: the listeners waiting
// in their blocking pop.
func blockedClients(t *testing.T, c *redis.Client) int {
	t.Helper()
	info, err := c.Info(context.Background(), "clients").Result()
	if err != nil {
		t.Fatalf("INFO clients: %v", err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "blocked_clients:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("blocked_clients %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatal("INFO clients has no blocked_clients")
	return 0
}

// waitBlocked waits until n listeners wait in their blocking pop.
func waitBlocked(t *testing.T, c *redis.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for blockedClients(t, c) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d listeners blocked, want %d", blockedClients(t, c), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Each enqueue wakes one idle listener, not all of them: with three
// replicas listening, ten enqueues (each waited for) make ten wake-ups in
// all, shared between them, and leave no token behind. (A broadcast made
// thirty, and an idle fleet of 23 raced 23 takes for every message.)
func TestWakeUpWakesOneListener(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	c := newClient(t, srv.Addr)
	acct := redistest.Prefix(t)
	var ls []*listener
	for range 3 {
		l := listen(t, open(t, c, acct))
		l.waitFor(t, 0, sms.ClassMarketing) // every class once at start
		ls = append(ls, l)
	}
	total := func() (n int) {
		for _, l := range ls {
			n += l.count()
		}
		return n
	}
	start := total()
	waitBlocked(t, c, len(ls))
	producer := open(t, c, acct)
	const enqueues = 10
	for i := range enqueues {
		enqueue(t, producer, msg("p", sms.ClassOTP))
		deadline := time.Now().Add(10 * time.Second)
		for total() < start+i+1 {
			if time.Now().After(deadline) {
				t.Fatalf("enqueue %d woke nobody", i)
			}
			time.Sleep(time.Millisecond)
		}
		waitBlocked(t, c, len(ls)) // every listener waits again: it handled what it popped
	}
	if got := total() - start; got != enqueues {
		for _, l := range ls {
			t.Logf("%v", l.got)
		}
		t.Errorf("%d enqueues made %d wake-ups between %d listeners, want one each", enqueues, got, len(ls))
	}
	if n := c.LLen(t.Context(), producer.k.wake()).Val(); n != 0 {
		t.Errorf("%d tokens left on the wake LIST with every listener waiting", n)
	}
}

// With no listener the wake LIST keeps only the newest wakeTokens tokens.
func TestWakeTokensBounded(t *testing.T) {
	q := newShared(t)
	for range wakeTokens + 10 {
		enqueue(t, q, msg("p", sms.ClassMarketing))
	}
	if n := q.c.LLen(t.Context(), q.k.wake()).Val(); n != wakeTokens {
		t.Errorf("wake LIST holds %d tokens, want %d", n, wakeTokens)
	}
}

// A stop ends the blocking pop at once (the listener's own LIST), not
// after wakeWait.
func TestListenStopsAtOnce(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	c := newClient(t, srv.Addr)
	l := listen(t, open(t, c, redistest.Prefix(t)))
	waitBlocked(t, c, 1)
	start := time.Now()
	l.stop()
	<-l.done
	if took := time.Since(start); took >= wakeWait/2 {
		t.Errorf("Listen returned %s after its context ended, want well under the pop's %s", took, wakeWait)
	}
}

// A listener pops only while its process could take at once: while ready
// waits (every lane busy) the token stays on the LIST for an idle replica,
// and the listener takes it once ready.
func TestListenOnlyWhenReady(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	c := newClient(t, srv.Addr)
	q := open(t, c, redistest.Prefix(t))
	idle := make(chan struct{})
	asked := make(chan struct{}, 1)
	l := listenWhen(t, q, func(ctx context.Context, _ bool) bool {
		select {
		case asked <- struct{}{}:
		default:
		}
		select {
		case <-idle:
			return true
		case <-ctx.Done():
			return false
		}
	})
	n := l.waitFor(t, 0, sms.ClassMarketing)
	select { // the listener waits for its process to be ready
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the listener never asked whether its process is ready")
	}
	enqueue(t, q, msg("p", sms.ClassOTP))
	if got := c.LLen(t.Context(), q.k.wake()).Val(); got != 1 {
		t.Fatalf("%d tokens on the wake LIST while the only listener is busy, want 1 (left for an idle replica)", got)
	}
	if b := blockedClients(t, c); b != 0 {
		t.Fatalf("%d listeners popping while their process is busy", b)
	}
	close(idle)
	l.waitFor(t, n, sms.ClassOTP)
	waitBlocked(t, c, 1)
	if got := c.LLen(t.Context(), q.k.wake()).Val(); got != 0 {
		t.Errorf("%d tokens left once the listener was ready", got)
	}
}

// A message its own process takes (queue.Checks.TakenHere) wakes no other
// replica; one it does not take does.
func TestTakenHereWakesNobody(t *testing.T) {
	q := newShared(t)
	for _, here := range []bool{true, false} {
		before := q.c.LLen(t.Context(), q.k.wake()).Val()
		m := msg("p", sms.ClassTransactional)
		res, err := q.EnqueueChecked(t.Context(), []queue.Checked{{Message: m, Checks: queue.Checks{TakenHere: here}}})
		if err != nil || res[0].Err != nil || res[0].Refused != queue.NotRefused {
			t.Fatalf("EnqueueChecked: %v %+v", err, res)
		}
		want := before + 1
		if here {
			want = before
		}
		if got := q.c.LLen(t.Context(), q.k.wake()).Val(); got != want {
			t.Errorf("TakenHere %v: %d tokens, want %d", here, got, want)
		}
	}
}

// A token this process cannot act on (its lane for the class is busy) is
// pushed back for another replica, and the listener then waits for its
// next idle lane (ready with fresh) before it pops again.
func TestBusyListenerHandsTokenOn(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	c := newClient(t, srv.Addr)
	q := open(t, c, redistest.Prefix(t))
	waiting := make(chan struct{}, 1)
	popped := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		q.Listen(ctx, func(sms.Class) bool {
			select {
			case popped <- struct{}{}:
			default:
			}
			return false // every lane busy
		}, func(ctx context.Context, fresh bool) bool {
			if !fresh {
				return ctx.Err() == nil
			}
			waiting <- struct{}{}
			<-ctx.Done()
			return false
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	<-popped // the wake-up of every class at start
	waitBlocked(t, c, 1)
	enqueue(t, q, msg("p", sms.ClassMarketing))
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the busy listener did not wait for an idle lane after a token it could not use")
	}
	if n := c.LLen(t.Context(), q.k.wake()).Val(); n != 1 {
		t.Fatalf("%d tokens on the LIST after a busy listener popped one, want it pushed back (1)", n)
	}
	other := listen(t, open(t, c, q.account))
	n := other.waitFor(t, 0, sms.ClassMarketing) // start
	other.waitFor(t, n, sms.ClassMarketing)      // the token handed on
}

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
