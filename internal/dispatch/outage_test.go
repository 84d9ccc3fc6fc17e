package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/limiter"
	"smsgw/internal/logtest"
	"smsgw/internal/provider"
	"smsgw/internal/queue"
	"smsgw/internal/queue/redisq"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

// TestRedisOutageAfterSend: Redis (with AOF) goes away right after the
// provider accepted a message and comes back a second later. The send loop
// keeps retrying the completion while the lease holds, so the message ends
// sent and the provider is not asked twice.
func TestRedisOutageAfterSend(t *testing.T) {
	t.Parallel()
	srv, acct, q := privateQueue(t, redistest.ServerOptions{AppendOnly: true}, 200*time.Millisecond)
	m := newMsg(sms.ClassTransactional)
	enqueue(t, q, m)

	called, stopped := make(chan struct{}, 8), make(chan struct{})
	rec := newRecorder(funcProvider(func(context.Context, *provider.Request) (provider.Result, error) {
		called <- struct{}{}
		<-stopped
		return provider.Result{ProviderID: "accepted"}, nil
	}))
	newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, acct.client, defaultLimits), Provider: rec, Lease: 10 * time.Second})
	<-called
	srv.Stop()
	close(stopped)
	time.Sleep(time.Second)
	srv.Start()

	got := waitTerminal(t, q, m.ID)[m.ID]
	if got.Status != sms.StatusSent || got.ProviderID != "accepted" {
		t.Errorf("message %s (%q) after the outage, want sent", got.Status, got.ProviderID)
	}
	if calls := rec.calls(); len(calls) != 1 {
		t.Errorf("provider called %d times, want once", len(calls))
	}
}

// privateRedis is a Redis server of the test's own, to stop and start, and
// a client of it that does not retry and gives up dialling after dial.
func privateRedis(t *testing.T, opts redistest.ServerOptions, dial time.Duration) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.StartServer(t, opts)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: dial})
	t.Cleanup(func() { _ = c.Close() })
	return srv, c
}

// privateQueue is a fresh account on a privateRedis and its queue.
func privateQueue(t *testing.T, opts redistest.ServerOptions, dial time.Duration) (*redistest.Server, account, *redisq.Queue) {
	t.Helper()
	srv, c := privateRedis(t, opts, dial)
	acct := account{name: redistest.Prefix(t), client: c}
	q, err := redisq.New(redisq.Config{Client: c, Account: acct.name})
	if err != nil {
		t.Fatal(err)
	}
	return srv, acct, q
}

// fallbackRig is a dispatcher whose limiter's Redis (a private server) is
// down from the start, so that the limiter decides at the fallback's burst
// max(1, 5/23) = 1; the queue lives on the shared Redis.
func fallbackRig(t *testing.T) (*redistest.Server, queue.Queue, *recorder, *Dispatcher) {
	t.Helper()
	srv, c := privateRedis(t, redistest.ServerOptions{}, 200*time.Millisecond)
	acct := newAccount(t)
	q := acct.queue(t, nil)
	lim := acct.limiter(t, c, defaultLimits)
	srv.Stop()
	rec := newRecorder(funcProvider(func(context.Context, *provider.Request) (provider.Result, error) {
		return provider.Result{ProviderID: "accepted"}, nil
	}))
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: lim, Provider: rec, CountSegments: true, Pacing: defaultLimits})
	return srv, q, rec, d
}

// TestFallbackBurstRequeues: while the limiter's Redis is down its
// fallback burst is 1, so a 2-segment message is refused with
// ErrCostExceedsBurst. The shared limiter grants 2, so the refusal is
// transient: the message is put back without spending an attempt (it
// used to be failed for good) and is sent once Redis is back.
func TestFallbackBurstRequeues(t *testing.T) {
	t.Parallel()
	srv, q, rec, d := fallbackRig(t)
	m := newMsg(sms.ClassTransactional)
	m.Segments = 2
	enqueue(t, q, m)
	d.Notify(sms.ClassTransactional)

	requeued := d.m.requeues.WithLabelValues("transactional", requeueRateWait)
	deadline := time.Now().Add(patience)
	for value(requeued) < 1 {
		got, err := q.Get(context.Background(), m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Done() {
			t.Fatalf("2-segment message %s (%q) while Redis is down, want queued", got.Status, got.LastError)
		}
		if time.Now().After(deadline) {
			t.Fatal("message never requeued")
		}
		time.Sleep(10 * time.Millisecond)
	}
	got, err := q.Get(context.Background(), m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Done() || got.Attempts != 0 {
		t.Fatalf("after the refusal: status %s attempts %d, want queued with no attempt spent", got.Status, got.Attempts)
	}
	if n := len(rec.calls()); n != 0 {
		t.Fatalf("provider called %d times while the limiter refused", n)
	}

	srv.Start()
	got = waitTerminal(t, q, m.ID)[m.ID]
	if got.Status != sms.StatusSent || got.Attempts != 1 {
		t.Errorf("after Redis is back: status %s attempts %d (%q), want sent at the first attempt", got.Status, got.Attempts, got.LastError)
	}
}

// TestFallbackBurstSendNow: on the fast path the same refusal is no slot
// (the API's 503 with Retry-After), not the client's fault; a cost beyond
// the shared burst stays ErrCostExceedsBurst (400).
func TestFallbackBurstSendNow(t *testing.T) {
	t.Parallel()
	_, _, rec, d := fallbackRig(t)
	m := newMsg(sms.ClassOTP)
	m.Segments = 2
	_, err := d.SendNow(context.Background(), m, time.Second)
	var noSlot NoSlotError
	if !errors.As(err, &noSlot) || noSlot.RetryAfter <= 0 || errors.Is(err, limiter.ErrCostExceedsBurst) {
		t.Fatalf("2-segment OTP while Redis is down: %v, want a NoSlotError with a RetryAfter", err)
	}
	m = newMsg(sms.ClassOTP)
	m.Segments = 6
	if _, err := d.SendNow(context.Background(), m, time.Second); !errors.Is(err, limiter.ErrCostExceedsBurst) {
		t.Fatalf("6-segment OTP (shared burst 5): %v, want ErrCostExceedsBurst", err)
	}
	if n := len(rec.calls()); n != 0 {
		t.Errorf("provider called %d times", n)
	}
}

// TestBreakerOpensOnFailures: after BreakerFailures consecutive 5xx the
// provider breaker opens and nothing is sent while it is open; messages it
// holds back spend no attempt. After BreakerOpen one probe goes through.
func TestBreakerOpensOnFailures(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	q := acct.queue(t, nil)
	var (
		mu    sync.Mutex
		calls []time.Time
	)
	p := funcProvider(func(context.Context, *provider.Request) (provider.Result, error) {
		mu.Lock()
		calls = append(calls, time.Now())
		mu.Unlock()
		return provider.Result{}, unavailableErr()
	})
	ids := enqueueN(t, q, 10, sms.ClassTransactional)
	const open = 1500 * time.Millisecond
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: p,
		Workers: 1, BulkBatch: 1, MaxAttempts: 100, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond,
		BreakerFailures: 3, BreakerOpen: open})
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(calls) }
	waitUntil(t, "3 failed sends", func() bool { return count() >= 3 })
	time.Sleep(open / 2)
	if n := count(); n != 3 {
		t.Fatalf("%d sends with the breaker open, want it to stop after 3 failures", n-3)
	}
	waitUntil(t, "the half-open probe", func() bool { return count() >= 4 })
	mu.Lock()
	gap := calls[3].Sub(calls[2])
	mu.Unlock()
	if gap < open-100*time.Millisecond {
		t.Errorf("probe %s after the breaker opened, want after %s", gap, open)
	}
	spentNow := func() int {
		spent := 0
		for _, id := range ids {
			got, err := q.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			spent += got.Attempts
		}
		return spent
	}
	// The probe's own attempt is recorded after its call returns: wait for
	// it, then no held-back send may have spent one.
	before, spent := count(), 0
	waitUntil(t, "the probe's attempt recorded", func() bool { spent = spentNow(); return spent >= before })
	if after := count(); spent > after {
		t.Errorf("%d attempts spent for %d..%d provider calls: sends held back by the breaker must spend none", spent, before, after)
	}
	if st := d.breaker.State(); st.String() == "closed" {
		t.Errorf("breaker %s after failing probes, want open or half-open", st)
	}
}

func TestNewConfigErrors(t *testing.T) {
	_, err := New(Config{Workers: -1, OTPWorkers: -1, Lease: -time.Second})
	if err == nil {
		t.Fatal("New accepted an empty config")
	}
	for _, want := range []string{"Queue", "Limiter", "Provider", "Owner", "Workers", "OTPWorkers", "Lease", "MaxAttempts", "BackoffBase", "BackoffMax"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	// The product settings have their defaults in the gateway's
	// configuration only: zero is refused here, except OTPWorkers.
	_, err = New(Config{})
	for _, want := range []string{"Workers 0", "Lease 0s", "MaxAttempts 0", "BackoffBase 0s", "BackoffMax 0s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not refuse %s", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "OTPWorkers") {
		t.Errorf("error %q refuses OTPWorkers 0", err)
	}
	acct := newAccount(t)
	_, err = New(Config{Queue: acct.queue(t, nil), Limiter: acct.limiter(t, nil, defaultLimits), Provider: funcProvider(nil),
		Owner: "o", Workers: 1, Lease: time.Second, MaxAttempts: 1, BackoffBase: 2 * time.Second, BackoffMax: time.Second})
	if err == nil || !strings.Contains(err.Error(), "BackoffMax 1s must be >= BackoffBase 2s") {
		t.Errorf("New = %v, want BackoffMax below BackoffBase refused", err)
	}
}

// TestTakeFailuresLoggedSampled: with the queue's Redis down every lane's
// take fails on every try; the warning is logged once, then at most once
// per failureLogEvery with the count (an audit saw 52 lines in 55 s from
// one replica, 46 a second from a fleet of 23), while the metric counts
// every failure.
func TestTakeFailuresLoggedSampled(t *testing.T) {
	t.Parallel()
	srv, acct, q := privateQueue(t, redistest.ServerOptions{}, 100*time.Millisecond)
	srv.Stop()
	var logs logtest.Buffer
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, acct.client, defaultLimits), Provider: funcProvider(nil),
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	waitUntil(t, "four failed takes", func() bool { return value(d.m.loopErrors.WithLabelValues("take")) >= 4 })
	if n := strings.Count(logs.String(), `msg="take failed"`); n != 1 {
		t.Errorf("%d take failed lines for %v failures within %s, want 1:\n%s", n, value(d.m.loopErrors.WithLabelValues("take")),
			failureLogEvery, logs.String())
	}
}
