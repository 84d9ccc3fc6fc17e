package redisq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"smsgw/internal/logtest"
	"smsgw/internal/queue"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

// TestReplicaDied: replica A takes with a 200 ms lease and never acks (it
// died); replica B, on its own connection, recovers the message once the
// lease has expired on the Redis clock and delivers it; A's late ack fails.
func TestReplicaDied(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a := newShared(t)
	b := open(t, newClient(t, redistest.Addr(t)), a.account)
	m := msg("p", sms.ClassOTP)
	enqueue(t, a, m)

	taken := time.Now()
	la, _, err := a.Take(ctx, queue.TakeOptions{Owner: "replica-a", Lease: 200 * time.Millisecond})
	if err != nil || la.Message.ID != m.ID {
		t.Fatalf("A Take = %v, %v", la, err)
	}
	if _, _, err := b.Take(ctx, queue.TakeOptions{Owner: "replica-b", Lease: time.Hour}); !errors.Is(err, queue.ErrEmpty) {
		t.Fatalf("B Take while A holds the lease: %v, want ErrEmpty", err)
	}
	n, err := b.Recover(ctx)
	if err != nil {
		t.Fatalf("B Recover: %v", err)
	}
	// Only meaningful if this machine got here well within the lease.
	if time.Since(taken) < 150*time.Millisecond && n != 0 {
		t.Fatalf("B recovered %d leases before A's expired", n)
	}
	deadline := time.Now().Add(20 * time.Second)
	for n == 0 {
		if time.Now().After(deadline) {
			t.Fatal("B never recovered A's lease")
		}
		time.Sleep(20 * time.Millisecond)
		if n, err = b.Recover(ctx); err != nil {
			t.Fatalf("B Recover: %v", err)
		}
	}
	if n != 1 || time.Since(taken) < 200*time.Millisecond {
		t.Fatalf("B recovered %d leases after %v, want 1 after 200ms", n, time.Since(taken))
	}
	lb, _, err := b.Take(ctx, queue.TakeOptions{Owner: "replica-b", Lease: time.Hour})
	if err != nil || lb.Message.ID != m.ID || lb.Message.Attempts != 0 {
		t.Fatalf("B Take = %+v, %v: want %s with no attempt spent", lb, err, m.ID)
	}
	if err := a.Complete(ctx, la, queue.Outcome{Status: sms.StatusSent, ProviderID: "from-a", Attempts: 1}); !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("A's late Complete: %v, want ErrLeaseLost", err)
	}
	if err := b.Complete(ctx, lb, queue.Outcome{Status: sms.StatusSent, ProviderID: "from-b", Attempts: 1}); err != nil {
		t.Fatalf("B Complete: %v", err)
	}
	if got, err := a.Get(ctx, m.ID); err != nil || got.ProviderID != "from-b" || got.Status != sms.StatusSent {
		t.Fatalf("Get = %+v, %v: want sent by B", got, err)
	}
}

// TestRedisRestart enqueues through a private redis-server with AOF
// (appendfsync always), stops or kills it, starts it again on the same data
// and checks that every acknowledged message, lease and idempotency key came
// back, using the same client (it reconnects by itself).
func TestRedisRestart(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"stop", "kill"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			srv := redistest.StartServer(t, redistest.ServerOptions{AppendOnly: true})
			c := newClient(t, srv.Addr)
			q := open(t, c, redistest.Prefix(t))
			if aof, err := q.CheckPersistence(ctx); err != nil || !aof {
				t.Fatalf("CheckPersistence = %v, %v: want true", aof, err)
			}
			const n = 200
			var all []*sms.Message
			for i := range n {
				m := msg(fmt.Sprintf("p%d", i%2), sms.Classes[i%3])
				m.IdempotencyKey = fmt.Sprintf("k%d", i)
				all = append(all, m)
			}
			enqueue(t, q, all[:n/2]...)
			if rs, err := q.EnqueueMany(ctx, all[n/2:]); err != nil || len(rs) != n/2 {
				t.Fatalf("EnqueueMany: %d, %v", len(rs), err)
			}
			sent := take(t, q, time.Hour)
			if err := q.Complete(ctx, sent, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm", Attempts: 1}); err != nil {
				t.Fatal(err)
			}
			held := take(t, q, time.Hour)

			if how == "kill" {
				srv.Kill()
			} else {
				srv.Stop()
			}
			if err := c.Ping(ctx).Err(); err == nil {
				t.Fatal("Redis still answers after it was stopped")
			}
			srv.Start()

			for _, m := range all {
				got, err := q.Get(ctx, m.ID)
				if m.ID == sent.Message.ID {
					continue // final: its body is dropped
				}
				if err != nil || got.Body != m.Body {
					t.Fatalf("after restart Get %s = %+v, %v", m.ID, got, err)
				}
			}
			if got, _ := q.Get(ctx, sent.Message.ID); got.Status != sms.StatusSent || got.ProviderID != "pm" {
				t.Fatalf("completed message after restart: %+v", got)
			}
			// The lease survived: its holder can still finish it.
			if err := q.Extend(ctx, held, time.Hour); err != nil {
				t.Fatalf("Extend of a lease held across the restart: %v", err)
			}
			replay := msg("p0", sms.ClassOTP)
			replay.IdempotencyKey = "k0"
			if res, err := q.Enqueue(ctx, replay); err != nil || !res.Existed || res.Message.ID != all[0].ID {
				t.Fatalf("replay after restart = %+v, %v", res, err)
			}
			seen := map[string]bool{sent.Message.ID: true, held.Message.ID: true}
			for {
				l, _, err := q.Take(ctx, queue.TakeOptions{Owner: "after", Lease: time.Hour})
				if errors.Is(err, queue.ErrEmpty) {
					break
				}
				if err != nil {
					t.Fatalf("Take after restart: %v", err)
				}
				if seen[l.Message.ID] {
					t.Fatalf("%s taken twice", l.Message.ID)
				}
				seen[l.Message.ID] = true
			}
			if len(seen) != n {
				t.Fatalf("%d of %d messages accounted for after restart", len(seen), n)
			}
		})
	}
}

// TestRedisDown: calls fail with an error (no panic, no hang past the
// context) while Redis is down, and work again once it is back.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{AppendOnly: true})
	c := clientWith(t, redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	q := open(t, c, redistest.Prefix(t))
	m := msg("p", sms.ClassOTP)
	enqueue(t, q, m)
	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, _, err := q.Take(ctx, queue.TakeOptions{Owner: "w", Lease: time.Minute}); err == nil || errors.Is(err, queue.ErrEmpty) {
		t.Fatalf("Take with Redis down: %v, want a Redis error", err)
	}
	if _, err := q.Enqueue(ctx, msg("p", sms.ClassOTP)); err == nil {
		t.Fatal("Enqueue with Redis down: no error")
	}
	srv.Start()
	if l := take(t, q, time.Minute); l.Message.ID != m.ID {
		t.Fatalf("took %s after Redis came back, want %s", l.Message.ID, m.ID)
	}
}

// TestEnqueueUnconfirmedMayBeStored: an enqueue whose script went out but
// got no answer is ErrMaybeStored (the gateway must not answer "nothing was
// queued"); one that never reached Redis, or that Redis refused, is not.
func TestEnqueueUnconfirmedMayBeStored(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{Args: []string{"--enable-debug-command", "local"}})
	c := clientWith(t, redis.Options{Addr: srv.Addr, ReadTimeout: 200 * time.Millisecond})
	q := open(t, c, redistest.Prefix(t))
	enqueue(t, q, msg("p", sms.ClassTransactional)) // the script is loaded

	sleeper := clientWith(t, redis.Options{Addr: srv.Addr, ReadTimeout: 10 * time.Second})
	slept := make(chan error, 1)
	go func() { slept <- sleeper.Do(context.Background(), "DEBUG", "SLEEP", "1").Err() }()
	probe := clientWith(t, redis.Options{Addr: srv.Addr, MaxRetries: -1, ReadTimeout: 50 * time.Millisecond})
	for probe.Ping(t.Context()).Err() == nil {
		time.Sleep(5 * time.Millisecond) // until the stall has begun
	}
	m := msg("p", sms.ClassTransactional)
	if _, err := q.Enqueue(t.Context(), m); !errors.Is(err, queue.ErrMaybeStored) {
		t.Fatalf("enqueue to a stalled Redis: %v, want ErrMaybeStored", err)
	}
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	if got, err := q.Get(t.Context(), m.ID); err != nil || got.Status != sms.StatusQueued {
		t.Fatalf("after the stall: %v, %v; want the message stored after all", got, err)
	}

	srv.Stop()
	if _, err := q.Enqueue(t.Context(), msg("p", sms.ClassTransactional)); err == nil || errors.Is(err, queue.ErrMaybeStored) {
		t.Fatalf("enqueue to a stopped Redis: %v, want an error that is not ErrMaybeStored", err)
	}
}

// mayHaveRun's cases: what went out and got no answer may run; what never
// went out, or that Redis answered, did not.
func TestMayHaveRun(t *testing.T) {
	t.Parallel()
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: &timeoutError{}}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{timeout, true},
		{fmt.Errorf("wrapped: %w", timeout), true},
		{io.EOF, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{&net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}, true},
		{context.DeadlineExceeded, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: &timeoutError{}}, false},
		{redis.ErrPoolTimeout, false},
		{redis.ErrClosed, false},
		{errors.New("unrelated"), false},
	} {
		if got := mayHaveRun(tc.err); got != tc.want {
			t.Errorf("mayHaveRun(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	// An error Redis answered: the script did not run (or ran and failed
	// whole: a script is atomic).
	c := redistest.Client(t)
	err := c.Do(t.Context(), "NOSUCHCOMMAND").Err()
	if err == nil || mayHaveRun(err) {
		t.Errorf("mayHaveRun(%v) = true, want false for Redis's own answer", err)
	}
}

type timeoutError struct{}

func (*timeoutError) Error() string   { return "i/o timeout" }
func (*timeoutError) Timeout() bool   { return true }
func (*timeoutError) Temporary() bool { return true }

// With WaitReplicas an enqueue returns only once a replica holds it: on a
// master without a replica it fails with ErrNotReplicated (the message is
// stored on the master alone, and the caller is told to retry), on a
// master with one it succeeds.
func TestEnqueueWaitsForReplicas(t *testing.T) {
	master := redistest.StartServer(t, redistest.ServerOptions{})
	c := newClient(t, master.Addr)
	q := openWith(t, Config{Client: c, Account: redistest.Prefix(t), WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	ctx := context.Background()
	if _, err := q.Enqueue(ctx, msg("p", sms.ClassOTP)); !errors.Is(err, queue.ErrNotReplicated) {
		t.Fatalf("enqueue without a replica: %v, want ErrNotReplicated", err)
	}
	replica := redistest.StartServer(t, redistest.ServerOptions{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port)}})
	_ = replica
	// Once the replica has synced, enqueues are confirmed.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := q.Enqueue(ctx, msg("p", sms.ClassOTP))
		if err == nil {
			break
		}
		if !errors.Is(err, queue.ErrNotReplicated) || time.Now().After(deadline) {
			t.Fatalf("enqueue with a replica: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestNewRejectsWaitWithoutTimeout(t *testing.T) {
	if _, err := New(Config{Client: redistest.Client(t), Account: "a", WaitReplicas: 1}); err == nil {
		t.Fatal("WaitReplicas without WaitTimeout accepted")
	}
}

// On a Cluster the WAIT goes on the connection of the account's master,
// where the enqueue ran: confirmed by that master's replica.
func TestEnqueueWaitsForReplicasCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster with replicas")
	}
	cl := redistest.StartClusterWithReplicas(t, 0)
	q := openWith(t, Config{Client: redistest.ClusterClient(t, cl.Addrs), Account: redistest.Prefix(t), WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	for range 3 {
		if _, err := q.Enqueue(context.Background(), msg("p", sms.ClassMarketing)); err != nil {
			t.Fatalf("enqueue on a Cluster with replicas: %v", err)
		}
	}
}

// TestDataLossDetected: Redis losing the account's data (a restart without
// persistence, a FLUSHALL, a failover to an empty replica) looks to every
// other call like an empty queue. The prune's epoch marker tells it apart:
// the replica that finds the marker gone counts and logs the loss and
// writes a new one; a replica that knew the old marker finds it changed
// and counts it too; after that, nothing more is counted. A replica that
// never saw a marker (the first start) counts nothing.
func TestDataLossDetected(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a := newShared(t)
	b := open(t, redistest.Client(t), a.account)
	lost := func(q *Queue) float64 {
		var m dto.Metric
		if err := q.m.dataLost.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	recoverNow := func(q *Queue) {
		t.Helper()
		q.pruned.Store(0) // prune on this Recover, not a minute later
		if _, err := q.Recover(ctx); err != nil {
			t.Fatal(err)
		}
	}
	enqueue(t, a, msg("p", sms.ClassTransactional))
	recoverNow(a)
	recoverNow(b)
	if lost(a) != 0 || lost(b) != 0 {
		t.Fatalf("data lost counted at the first prunes: a %v, b %v", lost(a), lost(b))
	}
	first := *a.epoch.Load()
	if *b.epoch.Load() != first || first == "" {
		t.Fatalf("epochs a %q, b %q: want one marker shared", first, *b.epoch.Load())
	}

	// Redis loses the account's data (here: every key of the account).
	deleteAccount(t, a.account)
	recoverNow(a)
	if lost(a) != 1 {
		t.Fatalf("replica a counted %v losses after the data went, want 1", lost(a))
	}
	second := *a.epoch.Load()
	if second == first {
		t.Fatal("the marker was not written anew")
	}
	recoverNow(b)
	if lost(b) != 1 || *b.epoch.Load() != second {
		t.Errorf("replica b: %v losses, epoch %q; want 1 and the new marker %q", lost(b), *b.epoch.Load(), second)
	}
	recoverNow(a)
	recoverNow(b)
	if lost(a) != 1 || lost(b) != 1 {
		t.Errorf("losses counted again with the data in place: a %v, b %v", lost(a), lost(b))
	}
}

func TestCheckPersistence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		opts     redistest.ServerOptions
		want     bool
		wantWarn bool
	}{
		{"aof on", redistest.ServerOptions{AppendOnly: true}, true, false},
		{"aof off", redistest.ServerOptions{}, false, true},
		{"aof on, CONFIG disabled", redistest.ServerOptions{AppendOnly: true, Args: []string{"--rename-command", "CONFIG", ""}}, true, false},
		{"aof off, CONFIG disabled", redistest.ServerOptions{Args: []string{"--rename-command", "CONFIG", ""}}, false, true},
		{"aof on, appendfsync no", redistest.ServerOptions{AppendOnly: true, Args: []string{"--appendfsync", "no"}}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t, tc.opts)
			var logs logtest.Buffer
			q := openWith(t, Config{Client: newClient(t, srv.Addr), Account: "a", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			got, err := q.CheckPersistence(t.Context())
			if err != nil || got != tc.want {
				t.Fatalf("CheckPersistence = %v, %v: want %v", got, err, tc.want)
			}
			if warned := strings.Contains(logs.String(), "level=WARN"); warned != tc.wantWarn {
				t.Fatalf("warned %v, want %v; logs:\n%s", warned, tc.wantWarn, logs.String())
			}
		})
	}
}
