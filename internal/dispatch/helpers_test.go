package dispatch

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/provider/httpprov"
	"smsgw/internal/provider/sim"
	"smsgw/internal/queue"
	"smsgw/internal/queue/redisq"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
	"smsgw/internal/state"
)

// patience bounds every wait in these tests: generous, because the package
// runs on a loaded machine and a wrong answer fails long before it.
const patience = 30 * time.Second

// testLogger logs to stderr with SMSGW_TEST_LOG=debug, else discards.
func testLogger() *slog.Logger {
	if os.Getenv("SMSGW_TEST_LOG") == "debug" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// account is one test's provider account on the shared Redis: its own hash
// tag, so tests run in parallel.
type account struct {
	name   string
	client *redis.Client // the producers' client (enqueue, assertions)
}

func newAccount(t testing.TB) account {
	t.Helper()
	return account{name: redistest.Prefix(t), client: redistest.Client(t)}
}

// queue returns a redisq queue of the account on c (nil: the account's client).
func (a account) queue(t testing.TB, c redis.UniversalClient) queue.Queue {
	t.Helper()
	if c == nil {
		c = a.client
	}
	q, err := redisq.New(redisq.Config{Client: c, Account: a.name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// suppression is the account's suppression list as the gateway hands it
// to the send loop in Redis mode (the list's HASH, read by the take
// script).
func (a account) suppression(t testing.TB) queue.Suppression {
	t.Helper()
	return queue.Suppression{Key: a.suppressions(t).IndexKey()}
}

// suppressions is the account's suppression list on Redis.
func (a account) suppressions(t testing.TB) *state.RedisSuppressions {
	t.Helper()
	sp, err := keyspace.New(a.name)
	if err != nil {
		t.Fatal(err)
	}
	l, err := state.NewRedisSuppressions(a.client, sp, 0)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// defaultLimits are the default limits of docs/design.md section 2: 90/s
// global, burst 5, marketing 70/s.
var defaultLimits = limiter.Config{
	Global:  limiter.Rate{PerSecond: 90, Burst: 5},
	Classes: map[string]limiter.Rate{"marketing": {PerSecond: 70, Burst: 5}},
}

// limiter returns the shared limiter (Redis GCRA behind the fallback
// breaker) of the account on c, the way the gateway composes it.
func (a account) limiter(t testing.TB, c redis.UniversalClient, cfg limiter.Config) limiter.Limiter {
	t.Helper()
	if c == nil {
		c = a.client
	}
	r, err := limiter.NewRedis(c, a.name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := limiter.NewShared(limiter.SharedConfig{Redis: r, MaxSenders: 23})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startSim runs the provider simulator over real HTTP and returns it with
// an httpprov adapter pointed at it.
func startSim(t testing.TB, cfg sim.Config) (*sim.Sim, *httpprov.Provider, string) {
	t.Helper()
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	p := newHTTPProvider(t, srv.URL)
	t.Cleanup(srv.Close) // after the adapter's idle connections are gone
	return s, p, srv.URL
}

func newHTTPProvider(t testing.TB, url string) *httpprov.Provider {
	t.Helper()
	p, err := httpprov.New(httpprov.Config{Name: "sim", URL: url + "/send", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.CloseIdleConnections)
	return p
}

// funcProvider is a function-type fake provider.
type funcProvider func(ctx context.Context, req *provider.Request) (provider.Result, error)

func (funcProvider) Name() string { return "func" }
func (f funcProvider) Send(ctx context.Context, req *provider.Request) (provider.Result, error) {
	return f(ctx, req)
}

// newMsg builds a message the way the API does: id and CreatedAt now.
func newMsg(c sms.Class) *sms.Message { return smstest.Message("test", c) }

// enqueueN enqueues n new messages of class c in q and returns their ids.
func enqueueN(t testing.TB, q queue.Queue, n int, c sms.Class) []string {
	t.Helper()
	ms := make([]*sms.Message, n)
	ids := make([]string, n)
	for i := range ms {
		ms[i] = newMsg(c)
		ids[i] = ms[i].ID
	}
	enqueue(t, q, ms...)
	return ids
}

func enqueue(t testing.TB, q queue.Queue, ms ...*sms.Message) {
	t.Helper()
	res, err := q.EnqueueMany(context.Background(), ms)
	if err != nil {
		t.Fatalf("EnqueueMany: %v", err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("EnqueueMany item %d: %v", i, r.Err)
		}
	}
}

// withRequired fills the Config fields the gateway always sets and a test
// left zero, with the values these tests were written for.
func withRequired(cfg Config) Config {
	if cfg.Workers == 0 {
		cfg.Workers = 8
	}
	if cfg.Lease == 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase = time.Second
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = max(5*time.Minute, cfg.BackoffBase)
	}
	return cfg
}

// newDispatcher returns a started Dispatcher stopped at cleanup. Fields the
// gateway always sets take the values of withRequired when zero.
func newDispatcher(t testing.TB, cfg Config) (*Dispatcher, *prometheus.Registry) {
	t.Helper()
	cfg = withRequired(cfg)
	reg := prometheus.NewRegistry()
	if cfg.Registerer == nil {
		cfg.Registerer = reg
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	if cfg.Owner == "" {
		cfg.Owner = "test"
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Stop(ctx)
	})
	return d, reg
}

// waitTerminal waits until every id is in a terminal status and
// returns the messages.
func waitTerminal(t testing.TB, q queue.Queue, ids ...string) map[string]*sms.Message {
	t.Helper()
	deadline := time.Now().Add(patience)
	out := make(map[string]*sms.Message, len(ids))
	for {
		pending := 0
		for _, id := range ids {
			if m, ok := out[id]; ok && m.Status.Done() {
				continue
			}
			m, err := q.Get(context.Background(), id)
			if err != nil {
				t.Fatalf("Get %s: %v", id, err)
			}
			out[id] = m
			if !m.Status.Done() {
				pending++
			}
		}
		if pending == 0 {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages not terminal after %s", pending, len(ids), patience)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitUntil polls cond (a state we cannot be signalled about) until true.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", patience, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countedClient is a client of the shared Redis whose round trips are counted.
func countedClient(t testing.TB) (*redis.Client, *redistest.RoundTrips) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t), PoolSize: 32})
	h := &redistest.RoundTrips{}
	c.AddHook(h)
	t.Cleanup(func() { _ = c.Close() })
	return c, h
}

// recorder is a provider wrapper that signals each call.
type recorder struct {
	next provider.Provider
	mu   sync.Mutex
	ids  []string
	call chan string
}

func newRecorder(next provider.Provider) *recorder {
	return &recorder{next: next, call: make(chan string, 4096)}
}

func (r *recorder) Name() string { return r.next.Name() }
func (r *recorder) Send(ctx context.Context, req *provider.Request) (provider.Result, error) {
	r.mu.Lock()
	r.ids = append(r.ids, req.ID)
	r.mu.Unlock()
	select {
	case r.call <- req.ID:
	default:
	}
	return r.next.Send(ctx, req)
}

func (r *recorder) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

// unavailableErr and rejectedErr build provider errors like adapters do.
func unavailableErr() error {
	return &provider.Error{Reason: provider.ReasonUnavailable, Temporary: true, Status: 503, Message: "injected"}
}

// optedOutErr is Twilio's 21610 as the adapter classifies it.
func optedOutErr() error {
	return &provider.Error{Reason: provider.ReasonOptedOut, Status: 400, Message: "twilio 21610: Attempt to send to unsubscribed recipient"}
}

func rejectedErr() error {
	return &provider.Error{Reason: provider.ReasonRejected, Status: 400, Message: "invalid number"}
}

// value reads a counter or gauge.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// histCount reads a histogram's sample count.
func histCount(o interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := o.Write(&m); err != nil {
		return -1
	}
	return float64(m.Histogram.GetSampleCount())
}

// histSum reads a histogram's sum of samples.
func histSum(o interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := o.Write(&m); err != nil {
		return -1
	}
	return m.Histogram.GetSampleSum()
}

func limiterConfig(perSecond float64, burst int) limiter.Config {
	return limiter.Config{Global: limiter.Rate{PerSecond: perSecond, Burst: burst}}
}
