package webhook

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"smsgw/internal/queue"
	"smsgw/internal/queue/embedded"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

// receiver is a producer's endpoint that records every delivery.
type receiver struct {
	mu        sync.Mutex
	attempts  map[string][]string // webhook-id -> bodies, in order
	delivered map[string]int      // webhook-id -> 2xx answers
	badSig    int
	answer    func(id string, n int) int // status for the n-th attempt (1-based) of id
	srv       *httptest.Server
}

func newReceiver(t *testing.T, answer func(id string, n int) int) *receiver {
	r := &receiver{attempts: map[string][]string{}, delivered: map[string]int{}, answer: answer}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		id := req.Header.Get(HeaderID)
		err := Verify(testKey, id, req.Header.Get(HeaderTimestamp), req.Header.Get(HeaderSignature), body, time.Now(), 5*time.Minute)
		r.mu.Lock()
		if err != nil {
			r.badSig++
		}
		r.attempts[id] = append(r.attempts[id], string(body))
		code := r.answer(id, len(r.attempts[id]))
		if code/100 == 2 {
			r.delivered[id]++
		}
		r.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) deliveredIDs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.delivered)
}

// outboxQueue is what the tests need of a backend: the outbox, and the
// queue transitions that write events.
type outboxQueue interface {
	queue.Queue
	queue.Outbox
}

type fixture struct {
	q   outboxQueue
	d   *Deliverer
	m   *Metrics
	reg *prometheus.Registry
}

// start runs a deliverer over a fresh embedded outbox; dest maps a producer
// to its endpoint.
func start(t *testing.T, dest map[string]string, edit func(*Config)) *fixture {
	t.Helper()
	f := newFixture(t, dest, edit)
	f.run(t)
	return f
}

// newFixture builds the outbox and the deliverer; run starts it.
func newFixture(t testing.TB, dest map[string]string, edit func(*Config)) *fixture {
	t.Helper()
	q, err := embedded.Open(embedded.Config{Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return newFixtureOn(t, q, dest, edit)
}

func newFixtureOn(t testing.TB, q outboxQueue, dest map[string]string, edit func(*Config)) *fixture {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Outbox: q, Owner: "test", Metrics: m,
		Resolve: func(e *queue.Event) (Destination, bool) {
			if e.CallbackURL != "" {
				return Destination{URL: e.CallbackURL, Key: testKey}, true
			}
			u, ok := dest[e.Producer]
			return Destination{URL: u, Key: testKey}, ok
		},
		Workers: 8, PerEndpoint: 4, Timeout: 5 * time.Second, MaxAge: time.Hour,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		BreakerFailures: 1000, BreakerOpen: time.Second, Idle: 10 * time.Millisecond,
	}
	if edit != nil {
		edit(&cfg)
	}
	if cfg.Client == nil {
		// The client's own timeout is the attempt's, as in the gateway.
		cfg.Client = NewClient(cfg.Timeout, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
	}
	client := cfg.Client
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.CloseIdleConnections)
	return &fixture{q: q, d: d, m: m, reg: reg}
}

func (f *fixture) run(t testing.TB) {
	f.d.Start(context.Background())
	t.Cleanup(f.d.Stop)
}

// sent adds n events of producer through the queue's own transitions:
// enqueue, take, complete as sent.
func (f *fixture) sent(t *testing.T, producer string, n int) {
	t.Helper()
	ctx := t.Context()
	for range n {
		m := smstest.Message(producer, sms.ClassTransactional)
		m.Callbacks = true
		m.Reference = "ref-" + m.ID
		if _, err := f.q.Enqueue(ctx, m); err != nil {
			t.Fatal(err)
		}
		l, _, err := f.q.Take(ctx, queue.TakeOptions{Owner: "t", Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "pm-" + m.ID, Attempts: 1}); err != nil {
			t.Fatal(err)
		}
	}
	f.d.Wake()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *fixture) stats(t *testing.T) queue.OutboxStats {
	s, err := f.q.OutboxStats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A receiver that fails the first attempt of every event gets every event
// delivered exactly once after the retry, with the same webhook-id and the
// same body on both attempts, each validly signed.
func TestEveryEventOnceAfterAFailedFirstAttempt(t *testing.T) {
	r := newReceiver(t, func(_ string, n int) int {
		if n == 1 {
			return http.StatusInternalServerError
		}
		return http.StatusNoContent
	})
	f := start(t, map[string]string{"notify": r.srv.URL + "/hook"}, nil)
	const n = 60
	f.sent(t, "notify", n)
	waitFor(t, "every event delivered and the outbox empty", func() bool {
		return r.deliveredIDs() == n && f.stats(t).Backlog == 0
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.badSig != 0 {
		t.Errorf("%d deliveries with a bad signature", r.badSig)
	}
	for id, bodies := range r.attempts {
		if len(bodies) != 2 || r.delivered[id] != 1 {
			t.Errorf("event %s: %d attempts, %d delivered; want 2 and 1", id, len(bodies), r.delivered[id])
			continue
		}
		if bodies[0] != bodies[1] {
			t.Errorf("event %s: the retry's body differs:\n %s\n %s", id, bodies[0], bodies[1])
		}
	}
	if got := value(f.m.attempts.WithLabelValues(OutcomeDelivered)); got != n {
		t.Errorf("delivered attempts %v, want %d", got, n)
	}
	if got := value(f.m.attempts.WithLabelValues(OutcomeRejected)); got != n {
		t.Errorf("rejected attempts %v, want %d", got, n)
	}
}

// An endpoint that hangs holds at most PerEndpoint deliveries; another
// producer's events are all delivered while it still hangs.
func TestASlowEndpointDoesNotDelayOthers(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	var mu sync.Mutex
	hanging := 0
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		hanging++
		mu.Unlock()
		<-release
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(unblock) // before slow.Close (cleanups run last first)
	fast := newReceiver(t, func(string, int) int { return http.StatusOK })
	f := start(t, map[string]string{"slow": slow.URL, "fast": fast.srv.URL}, func(c *Config) {
		c.Timeout = 20 * time.Second
		c.PerEndpoint = 2
		c.Workers = 4
	})
	t.Cleanup(unblock) // runs before the deliverer's Stop
	f.sent(t, "slow", 40)
	f.sent(t, "fast", 40)
	waitFor(t, "the fast producer's events", func() bool { return fast.deliveredIDs() == 40 })
	mu.Lock()
	h := hanging
	mu.Unlock()
	if h > 2 {
		t.Errorf("%d deliveries hang at the slow endpoint, want at most its limit 2", h)
	}
	if got := value(f.m.deferred.WithLabelValues(deferBusy)); got == 0 {
		t.Error("no delivery was deferred for a busy endpoint")
	}
	unblock()
	waitFor(t, "the slow producer's events after it recovers", func() bool { return f.stats(t).Backlog == 0 })
}

// An endpoint that never answers 2xx: each event is retried with backoff
// until max age, then dead (listed, counted). A retried dead event is
// delivered once the endpoint recovers.
func TestDeadAfterMaxAgeAndRetried(t *testing.T) {
	var mu sync.Mutex
	up := false
	r := newReceiver(t, func(string, int) int {
		mu.Lock()
		defer mu.Unlock()
		if up {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	f := start(t, map[string]string{"notify": r.srv.URL}, func(c *Config) {
		c.MaxAge = 300 * time.Millisecond
	})
	f.sent(t, "notify", 5)
	// The counter moves after the store recorded the death.
	waitFor(t, "every event dead and counted", func() bool {
		s := f.stats(t)
		return s.Dead == 5 && s.Backlog == 0 && value(f.m.dead) == 5
	})
	dead, err := f.q.DeadEvents(t.Context(), 10)
	if err != nil || len(dead) != 5 {
		t.Fatalf("DeadEvents = %d, %v", len(dead), err)
	}
	for _, e := range dead {
		if (e.Attempts < 1 || e.LastError != "HTTP 503") && (e.Attempts != 0 || !strings.HasPrefix(e.LastError, "not tried yet: endpoint ")) {
			t.Errorf("dead event %s: attempts %d last error %q", e.ID, e.Attempts, e.LastError)
		}
	}
	mu.Lock()
	up = true
	mu.Unlock()
	if err := f.q.RetryDeadEvent(t.Context(), dead[0].ID); err != nil {
		t.Fatal(err)
	}
	f.d.Wake()
	waitFor(t, "the retried event delivered", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.delivered[dead[0].ID] == 1
	})
}

// A destination on a private address is refused at connect time unless
// allowed: the receiver never sees a request.
func TestPrivateDestinationRefused(t *testing.T) {
	r := newReceiver(t, func(string, int) int { return http.StatusOK })
	f := start(t, map[string]string{"notify": r.srv.URL}, func(c *Config) {
		c.Client = NewClient(time.Second, nil)
	})
	f.sent(t, "notify", 2)
	waitFor(t, "refused attempts", func() bool {
		return value(f.m.attempts.WithLabelValues(OutcomeRefused)) >= 2
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.attempts) != 0 {
		t.Fatalf("the private receiver saw %d events", len(r.attempts))
	}
}

// value reads a counter.
func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// An endpoint that does not answer at all (nothing listens) opens its
// breaker: its events wait without spending attempts, a trial goes now
// and then, and a receiver that answers 503 to every first attempt never
// opens it (an answer is not an outage).
func TestBreakerHoldsAnEndpointThatDoesNotAnswer(t *testing.T) {
	gone := httptest.NewServer(http.NotFoundHandler())
	url := gone.URL
	gone.Close()
	firstFails := newReceiver(t, func(_ string, n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	f := start(t, map[string]string{"gone": url, "flaky": firstFails.srv.URL}, func(c *Config) {
		c.BreakerFailures = 3
		c.BreakerOpen = time.Hour
	})
	f.sent(t, "gone", 20)
	f.sent(t, "flaky", 20)
	waitFor(t, "the flaky receiver's events", func() bool { return firstFails.deliveredIDs() == 20 })
	waitFor(t, "the breaker holding the dead endpoint's events", func() bool {
		return value(f.m.deferred.WithLabelValues(deferBreaker)) >= 17
	})
	// 3 failures open it; at most PerEndpoint-1 more were in flight then.
	if got := value(f.m.attempts.WithLabelValues(OutcomeError)); got > 3+4-1 {
		t.Errorf("%v attempts at an endpoint whose breaker opened after 3", got)
	}
}

// TestUnresolvedRetried: an event this replica has no destination for
// (its configuration lacks the producer's webhook or the callback prefix,
// as in the middle of a rolling change) is retried with backoff, not
// given up: once the destination resolves (the configuration catches up,
// or another replica claims it) it is delivered; nothing died meanwhile.
func TestUnresolvedRetried(t *testing.T) {
	r := newReceiver(t, func(string, int) int { return http.StatusNoContent })
	var known atomic.Bool
	var mu sync.Mutex
	asked := map[string]int{}
	f := start(t, nil, func(c *Config) {
		c.Resolve = func(e *queue.Event) (Destination, bool) {
			mu.Lock()
			asked[e.ID]++
			mu.Unlock()
			return Destination{URL: r.srv.URL + "/hook", Key: testKey}, known.Load()
		}
	})
	f.sent(t, "notify", 3)
	waitFor(t, "every event asked for twice without a destination", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range asked {
			if c >= 2 {
				n++
			}
		}
		return n == 3
	})
	if s := f.stats(t); s.Dead != 0 || s.Backlog != 3 || value(f.m.dead) != 0 {
		t.Fatalf("without a destination: %+v, %v counted dead; want 3 pending, none dead", s, value(f.m.dead))
	}
	known.Store(true)
	waitFor(t, "every event delivered", func() bool { return r.deliveredIDs() == 3 && f.stats(t).Backlog == 0 })
	if d := f.stats(t).Dead; d != 0 {
		t.Errorf("%d events died while their destination was unknown", d)
	}
}

// An attempt that Stop cuts short is not the endpoint's failure: the event
// is due again at once, no attempt spent, no error stored, no attempt
// counted in the metrics. Before, it was booked as a failed attempt with
// its backoff, and with webhooks.max_age short a rolling restart could
// kill events. The next claim finds it (at least once, same webhook-id).
func TestStopCutsAttemptWithoutSpendingIt(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case arrived <- struct{}{}:
		default:
		}
		select { // never answers while the test runs
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs before srv.Close
	f := newFixture(t, map[string]string{"app": srv.URL + "/cb"}, nil)
	f.d.Start(context.Background())
	f.sent(t, "app", 1)
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the attempt never reached the endpoint")
	}
	f.d.Stop()

	var got []*queue.LeasedEvent
	waitFor(t, "the event to be claimable again", func() bool {
		var err error
		got, err = f.q.ClaimEvents(t.Context(), "probe", time.Minute, 10)
		if err != nil {
			t.Fatal(err)
		}
		return len(got) > 0
	})
	if e := got[0].Event; e.Attempts != 0 || e.LastError != "" {
		t.Errorf("event after a stop: attempts %d, last error %q; want 0 and none", e.Attempts, e.LastError)
	}
	for _, o := range Outcomes {
		if v := value(f.m.attempts.WithLabelValues(o)); v != 0 {
			t.Errorf("%v attempts counted as %s", v, o)
		}
	}
}
