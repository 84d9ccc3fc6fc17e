package embedded

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"smsgw/internal/queue"
	"smsgw/internal/queue/queuetest"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
	"smsgw/internal/state"
)

func TestMain(m *testing.M) {
	// The kill -9 test re-executes this binary as the child that enqueues.
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(runChild(dir))
	}
	goleak.VerifyTestMain(m)
}

func open(t testing.TB, cfg Config) *Queue {
	t.Helper()
	if cfg.Path == "" {
		cfg.Path = t.TempDir()
	}
	q, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := q.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return q
}

func TestConformance(t *testing.T) {
	queuetest.Run(t, queuetest.Harness{
		New: func(t *testing.T) queue.Queue { return open(t, Config{}) },
		Reopen: func(t *testing.T, old queue.Queue) queue.Queue {
			path := old.(*Queue).db.Path()
			if err := old.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return open(t, Config{Path: strings.TrimSuffix(path, "/"+FileName)})
		},
		Suppressions: localSuppressions,
	})
}

// localSuppressions is the gateway's suppression list of embedded mode
// (state.LocalSuppressions, its own bbolt file beside the queue's), read
// by the take through Listed as the gateway wires it.
func localSuppressions(t *testing.T, q queue.Queue) (queue.Suppression, func(id string)) {
	t.Helper()
	l, err := state.OpenLocalSuppressions(filepath.Dir(q.(*Queue).db.Path()), 0)
	if err != nil {
		t.Fatalf("OpenLocalSuppressions: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	add := func(id string) {
		if _, err := l.Add(t.Context(), state.Suppression{ID: id, Masked: "+8190****5678", Source: state.SourceRecipient}); err != nil {
			t.Fatalf("suppress %s: %v", id, err)
		}
	}
	return queue.Suppression{Listed: l.Contains}, add
}

// TestExclusiveLock: a second opener of the same store fails fast and says
// why, instead of two replicas writing one file.
func TestExclusiveLock(t *testing.T) {
	dir := t.TempDir()
	open(t, Config{Path: dir})
	start := time.Now()
	q2, err := Open(Config{Path: dir, LockTimeout: 100 * time.Millisecond})
	if err == nil {
		_ = q2.Close()
		t.Fatal("second Open of a locked store succeeded")
	}
	if !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("second Open: %v, want a clear lock error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("second Open took %v to fail", d)
	}
}

func TestOpenValidates(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no path":                     {},
		"retention below idem window": {Path: t.TempDir(), Retention: time.Hour, IdempotencyWindow: 2 * time.Hour},
		"negative retention":          {Path: t.TempDir(), Retention: -time.Hour},
	} {
		t.Run(name, func(t *testing.T) {
			if q, err := Open(cfg); err == nil {
				_ = q.Close()
				t.Fatal("Open succeeded")
			}
		})
	}
}

// clock is a settable clock for retention and window tests.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newClock() *clock { return &clock{now: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)} }

// openRetained is a queue on a clock of its own that keeps messages 48 h
// and idempotency keys 24 h.
func openRetained(t testing.TB) (*clock, *Queue) {
	t.Helper()
	clk := newClock()
	return clk, open(t, Config{Now: clk.Now, Retention: 48 * time.Hour, IdempotencyWindow: 24 * time.Hour})
}

func msg(producer string, c sms.Class, now time.Time) *sms.Message {
	return smstest.MessageAt(producer, c, now)
}

func TestRetention(t *testing.T) {
	clk, q := openRetained(t)
	ctx := t.Context()
	sent, dead, live := msg("p", sms.ClassOTP, clk.Now()), msg("p", sms.ClassOTP, clk.Now()), msg("p", sms.ClassMarketing, clk.Now())
	sent.IdempotencyKey = "k"
	for _, m := range []*sms.Message{sent, dead, live} {
		if _, err := q.Enqueue(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	take := func() *queue.Leased {
		l, _, err := q.Take(ctx, queue.TakeOptions{Lease: time.Hour, Classes: []sms.Class{sms.ClassOTP}})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if err := q.Complete(ctx, take(), queue.Outcome{Status: sms.StatusSent, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	if err := q.Dead(ctx, take(), "x", 1); err != nil {
		t.Fatal(err)
	}
	clk.Add(48*time.Hour - time.Millisecond)
	if n, err := q.Prune(ctx); err != nil || n != 0 {
		t.Fatalf("Prune before retention = %d, %v", n, err)
	}
	clk.Add(time.Millisecond)
	if n, err := q.Prune(ctx); err != nil || n != 2 {
		t.Fatalf("Prune at retention = %d, %v: want 2", n, err)
	}
	for _, id := range []string{sent.ID, dead.ID} {
		if _, err := q.Get(ctx, id); !errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("Get %s after retention: %v", id, err)
		}
	}
	if _, err := q.Get(ctx, live.ID); err != nil {
		t.Fatalf("queued message pruned: %v", err)
	}
	if st, _ := q.Stats(ctx); st[sms.ClassOTP].Dead != 0 {
		t.Fatalf("dead count after prune: %+v", st[sms.ClassOTP])
	}
	again := msg("p", sms.ClassOTP, clk.Now())
	again.IdempotencyKey = "k"
	if res, err := q.Enqueue(ctx, again); err != nil || res.Existed {
		t.Fatalf("key after retention = %+v, %v: want a new message", res, err)
	}
	checkInvariants(t, q)
}

func TestIdempotencyWindow(t *testing.T) {
	clk := newClock()
	q := open(t, Config{Now: clk.Now})
	ctx := t.Context()
	first := msg("p", sms.ClassOTP, clk.Now())
	first.IdempotencyKey = "k"
	if _, err := q.Enqueue(ctx, first); err != nil {
		t.Fatal(err)
	}
	clk.Add(24*time.Hour - time.Millisecond)
	replay := msg("p", sms.ClassOTP, clk.Now())
	replay.IdempotencyKey = "k"
	if res, err := q.Enqueue(ctx, replay); err != nil || !res.Existed || res.Message.ID != first.ID {
		t.Fatalf("replay inside the window = %+v, %v", res, err)
	}
	clk.Add(time.Millisecond)
	if res, err := q.Enqueue(ctx, replay); err != nil || res.Existed || res.Message.ID != replay.ID {
		t.Fatalf("replay after the window = %+v, %v: want a new message", res, err)
	}
	// Both stay readable; the key now names the second.
	for _, id := range []string{first.ID, replay.ID} {
		if _, err := q.Get(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	third := msg("p", sms.ClassOTP, clk.Now())
	third.IdempotencyKey = "k"
	if res, err := q.Enqueue(ctx, third); err != nil || !res.Existed || res.Message.ID != replay.ID {
		t.Fatalf("third = %+v, %v: want the second", res, err)
	}
}

// TestNotBeforeRoundsUp: a not-before inside a millisecond is not due until
// that millisecond has fully passed.
func TestNotBeforeRoundsUp(t *testing.T) {
	clk := newClock()
	q := open(t, Config{Now: clk.Now})
	m := msg("p", sms.ClassOTP, clk.Now())
	m.NotBefore = clk.Now().Add(10*time.Millisecond + 300*time.Microsecond)
	if _, err := q.Enqueue(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	clk.Add(10 * time.Millisecond)
	_, wait, err := q.Take(t.Context(), queue.TakeOptions{Lease: time.Second})
	if !errors.Is(err, queue.ErrEmpty) || wait != time.Millisecond {
		t.Fatalf("Take at +10ms = %v, %v: want ErrEmpty, 1ms", err, wait)
	}
	clk.Add(time.Millisecond)
	if _, _, err := q.Take(t.Context(), queue.TakeOptions{Lease: time.Second}); err != nil {
		t.Fatalf("Take at +11ms: %v", err)
	}
}

// TestCountersMatchIndexes drives a random workload and then recounts every
// index, so Stats and Outstanding (counters) cannot drift from the truth.
func TestCountersMatchIndexes(t *testing.T) {
	clk := newClock()
	q := open(t, Config{Now: clk.Now})
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(1, 2))
	var held []*queue.Leased
	for i := range 600 {
		clk.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
		switch op := rng.IntN(10); {
		case op < 3:
			m := msg([]string{"a", "b", "c"}[rng.IntN(3)], sms.Classes[rng.IntN(3)], clk.Now())
			if rng.IntN(4) == 0 {
				m.NotBefore = clk.Now().Add(time.Duration(rng.IntN(2000)) * time.Millisecond)
			}
			if rng.IntN(4) == 0 {
				m.IdempotencyKey = []string{"x", "y", "z"}[rng.IntN(3)]
			}
			if _, err := q.Enqueue(ctx, m); err != nil {
				t.Fatal(err)
			}
		case op < 5:
			l, _, err := q.Take(ctx, queue.TakeOptions{Lease: time.Duration(100+rng.IntN(1000)) * time.Millisecond})
			if err == nil {
				held = append(held, l)
			} else if !errors.Is(err, queue.ErrEmpty) {
				t.Fatal(err)
			}
		case op < 8 && len(held) > 0:
			j := rng.IntN(len(held))
			l := held[j]
			held = append(held[:j], held[j+1:]...)
			var err error
			switch rng.IntN(4) {
			case 0:
				err = q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, Attempts: 1})
			case 1:
				err = q.Requeue(ctx, l, queue.RequeueOptions{After: time.Duration(rng.IntN(500)) * time.Millisecond, SpendAttempt: true})
			case 2:
				err = q.Dead(ctx, l, "x", 2)
			case 3:
				err = q.Extend(ctx, l, time.Second)
				held = append(held, l)
			}
			if err != nil && !errors.Is(err, queue.ErrLeaseLost) {
				t.Fatal(err)
			}
		case op == 8:
			if _, err := q.Recover(ctx); err != nil {
				t.Fatal(err)
			}
		default:
			dl, err := q.DeadLetters(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(dl) > 0 {
				if err := q.RetryDead(ctx, dl[0].ID); err != nil {
					t.Fatal(err)
				}
			}
		}
		if i%100 == 0 {
			checkInvariants(t, q)
		}
	}
	checkInvariants(t, q)
}

// checkInvariants recounts the indexes from the messages and compares them
// with the counters and with each other.
func checkInvariants(t *testing.T, q *Queue) {
	t.Helper()
	err := q.db.View(func(tx *bolt.Tx) error {
		type key struct {
			c    sms.Class
			kind byte
		}
		want := map[key]int64{}
		out := map[string]int64{}
		inReady, inLease, inDead, inDone := 0, 0, 0, 0
		err := tx.Bucket(bMsgs).ForEach(func(k, v []byte) error {
			r, err := getEntry(tx, string(k))
			if err != nil {
				return err
			}
			switch r.Msg.Status {
			case sms.StatusQueued:
				want[key{r.Msg.Class, kindQueued}]++
				out[r.Msg.Producer]++
				inReady++
				if got := tx.Bucket(bReady).Get(readyKey(r.Msg.Class, r.Due, r.Seq)); string(got) != r.Msg.ID {
					t.Errorf("%s queued but not in ready at its due", r.Msg.ID)
				}
			case sms.StatusSending:
				want[key{r.Msg.Class, kindLeased}]++
				out[r.Msg.Producer]++
				inLease++
				if !bucketHas(tx.Bucket(bLeases), timeKey(r.Lease, r.Msg.ID)) {
					t.Errorf("%s sending without a lease entry", r.Msg.ID)
				}
			default:
				inDone++
				if !bucketHas(tx.Bucket(bDone), timeKey(r.At, r.Msg.ID)) {
					t.Errorf("%s terminal but not in done", r.Msg.ID)
				}
				if r.Msg.Dead {
					want[key{r.Msg.Class, kindDead}]++
					inDead++
					if !bucketHas(tx.Bucket(bDead), timeKey(r.At, r.Msg.ID)) {
						t.Errorf("%s dead but not in dead", r.Msg.ID)
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, c := range sms.Classes {
			for _, kind := range []byte{kindQueued, kindLeased, kindDead} {
				if got := getCount(tx.Bucket(bCounts), countKey(c, kind)); got != want[key{c, kind}] {
					t.Errorf("counter %s/%c = %d, recount %d", c, kind, got, want[key{c, kind}])
				}
			}
		}
		for p, n := range out {
			if got := getCount(tx.Bucket(bOut), []byte(p)); got != n {
				t.Errorf("outstanding %s = %d, recount %d", p, got, n)
			}
		}
		for name, n := range map[string]int{"ready": inReady, "leases": inLease, "dead": inDead, "done": inDone} {
			if got := tx.Bucket([]byte(name)).Stats().KeyN; got != n {
				t.Errorf("bucket %s has %d keys, want %d", name, got, n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// bucketHas reports whether k is a key of b (values may be empty).
func bucketHas(b *bolt.Bucket, k []byte) bool {
	got, _ := b.Cursor().Seek(k)
	return got != nil && string(got) == string(k)
}

// TestRequeueGoesBehindWithinTheSameMillisecond: a message requeued without
// delay goes behind one enqueued in the same millisecond (the conformance
// case Requeue failed when its calls fell in one millisecond).
func TestRequeueGoesBehindWithinTheSameMillisecond(t *testing.T) {
	clk := newClock() // frozen: every call in one millisecond
	q := open(t, Config{Now: clk.Now})
	ctx := t.Context()
	a, b := msg("p", sms.ClassMarketing, clk.Now()), msg("p", sms.ClassMarketing, clk.Now())
	for _, m := range []*sms.Message{a, b} {
		if _, err := q.Enqueue(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	l, _, err := q.Take(ctx, queue.TakeOptions{Lease: time.Hour})
	if err != nil || l.Message.ID != a.ID {
		t.Fatalf("Take = %v, %v: want %s", l, err, a.ID)
	}
	if err := q.Requeue(ctx, l, queue.RequeueOptions{}); err != nil {
		t.Fatal(err)
	}
	if l, _, err = q.Take(ctx, queue.TakeOptions{Lease: time.Hour}); err != nil || l.Message.ID != b.ID {
		t.Fatalf("Take after the requeue = %v, %v: want %s ahead of the requeued %s", l.Message.ID, err, b.ID, a.ID)
	}
}

// TestEarlyReceiptsPruned: a receipt kept for an id not stored yet
// (bEarly) is pruned once its window has passed, a newer one stays, and
// after pruning a RecordSent of the old id finds nothing to apply.
func TestEarlyReceiptsPruned(t *testing.T) {
	clk := newClock()
	q := open(t, Config{Now: clk.Now})
	ctx := t.Context()
	early := func() *sms.Message {
		m := msg("login", sms.ClassOTP, clk.Now())
		m.ProviderID = "pm-" + m.ID[len(m.ID)-6:]
		out, err := q.ApplyReceipt(ctx, queue.Receipt{Reference: m.ID, Status: sms.StatusDelivered})
		if err != nil || out.Result != queue.ReceiptParked {
			t.Fatalf("early receipt = %+v, %v; want parked", out, err)
		}
		return m
	}
	kept := func() int {
		n := 0
		if err := q.db.View(func(tx *bolt.Tx) error { n = tx.Bucket(bEarly).Stats().KeyN; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	old := early()
	clk.Add(queue.EarlyReceiptWindow / 2)
	young := early()
	clk.Add(queue.EarlyReceiptWindow/2 + time.Second)
	if _, err := q.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if n := kept(); n != 1 {
		t.Fatalf("%d early receipts kept after the old one's window, want 1", n)
	}
	if st, err := q.RecordSent(ctx, old); err != nil || st != sms.StatusSent {
		t.Fatalf("RecordSent of the pruned one = %q, %v; want sent", st, err)
	}
	if st, err := q.RecordSent(ctx, young); err != nil || st != sms.StatusDelivered {
		t.Fatalf("RecordSent of the kept one = %q, %v; want delivered", st, err)
	}
	if n := kept(); n != 0 {
		t.Fatalf("%d early receipts kept after both were stored", n)
	}
}

// TestTakeDropsOrphanReadyEntry: a ready-index entry whose message is
// missing does not block its class (Take errored on it before, forever);
// it is dropped and the next message is handed out, as the Redis take
// script does.
func TestTakeDropsOrphanReadyEntry(t *testing.T) {
	q := open(t, Config{})
	ctx := t.Context()
	m := smstest.Message("p", sms.ClassMarketing)
	if _, err := q.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	orphan := smstest.Message("p", sms.ClassMarketing)
	if err := q.update(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bReady).Put(readyKey(sms.ClassMarketing, 0, 0), []byte(orphan.ID))
	}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second time, nothing is left to skip
		l, _, err := q.Take(ctx, queue.TakeOptions{Owner: "t", Lease: time.Minute, Classes: []sms.Class{sms.ClassMarketing}})
		if err != nil || l.Message.ID != m.ID {
			t.Fatalf("Take past an orphan entry: %v, %v; want %s", l, err, m.ID)
		}
		if err := q.Requeue(ctx, l, queue.RequeueOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestShelf runs the set-aside cases; the pause is a flag per producer, as
// the gateway's operator pause answers Held in this process.
func TestShelf(t *testing.T) {
	var mu sync.Mutex
	held := map[queue.Queue]map[string]bool{}
	queuetest.RunShelf(t, queuetest.ShelfHarness{
		New: func(t *testing.T) queue.Queue { return open(t, Config{}) },
		Pause: func(t *testing.T, q queue.Queue, producer string, on bool) queue.Shelf {
			mu.Lock()
			defer mu.Unlock()
			if held[q] == nil {
				held[q] = map[string]bool{}
			}
			held[q][producer] = on
			return queue.Shelf{Held: func() bool {
				mu.Lock()
				defer mu.Unlock()
				return held[q][producer]
			}}
		},
	})
}

// TestCompactFile: a store that held a backlog keeps its file size after
// the backlog is gone (bbolt never gives pages back); CompactFile returns
// the space and keeps every message: the queued ones are taken in their
// order, a new one after them (the bucket sequences carried over), and
// the canceled ones still read as canceled.
func TestCompactFile(t *testing.T) {
	dir := t.TempDir()
	q, err := Open(Config{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	const n, kept = 5000, 200
	ms := make([]*sms.Message, n)
	for i := range ms {
		ms[i] = sizeMsg(i)
	}
	for i := 0; i < n; i += 500 {
		if _, err := q.EnqueueMany(t.Context(), ms[i:i+500]); err != nil {
			t.Fatal(err)
		}
	}
	// The backlog goes: all but the last kept are canceled (concurrently,
	// so that they share commits).
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n-kept; i += 16 {
				if _, err := q.Cancel(t.Context(), ms[i].ID, ms[i].Producer); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}

	res, err := CompactFile(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d → %d bytes, %d keys", filepath.Base(res.File), res.Before, res.After, res.Keys)
	if res.After <= 0 || res.After > res.Before/2 {
		t.Errorf("compacted %d → %d bytes; want less than half once %d of %d messages are gone", res.Before, res.After, n-kept, n)
	}
	if st, err := os.Stat(filepath.Join(dir, FileName)); err != nil || st.Size() != res.After {
		t.Errorf("the store file after compaction: %v, %v; want %d bytes", st, err, res.After)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName+".compact")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the copy is left beside the store: %v", err)
	}

	q, err = Open(Config{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = q.Close() }()
	extra := sizeMsg(n)
	if _, err := q.Enqueue(t.Context(), extra); err != nil {
		t.Fatal(err)
	}
	want := append([]*sms.Message{}, ms[n-kept:]...)
	want = append(want, extra)
	for i, w := range want {
		l, _, err := q.Take(t.Context(), queue.TakeOptions{Owner: "t", Lease: time.Hour})
		if err != nil {
			t.Fatalf("take %d of %d after compaction: %v", i, len(want), err)
		}
		if l.Message.ID != w.ID || l.Message.Body != w.Body {
			t.Fatalf("take %d after compaction: %s, want %s (queue order or body lost)", i, l.Message.ID, w.ID)
		}
	}
	if _, _, err := q.Take(t.Context(), queue.TakeOptions{Owner: "t", Lease: time.Hour}); !errors.Is(err, queue.ErrEmpty) {
		t.Fatalf("after the %d queued messages: %v, want ErrEmpty", len(want), err)
	}
	for _, i := range []int{0, n / 2, n - kept - 1} {
		m, err := q.Get(t.Context(), ms[i].ID)
		if err != nil || m.Status != sms.StatusCanceled {
			t.Errorf("canceled message %d after compaction: %+v, %v", i, m, err)
		}
	}
}

// TestCompactFileRefusesAStoreInUse: a running gateway's store is left
// alone, with an answer that says why.
func TestCompactFileRefusesAStoreInUse(t *testing.T) {
	dir := t.TempDir()
	q := open(t, Config{Path: dir})
	if _, err := q.Enqueue(t.Context(), sizeMsg(0)); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	_, err = CompactFile(dir, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("compacting a store in use: %v, want it refused as in use", err)
	}
	after, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil || string(after) != string(before) {
		t.Fatalf("the store in use changed (%v)", err)
	}
	if _, err := CompactFile(t.TempDir(), 0); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("compacting a directory without a store: %v, want not exist", err)
	}
}
