package limiter

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"smsgw/internal/redistest"
)

// logCounter counts log records by level and message.
type logCounter struct {
	mu      sync.Mutex
	records []string
}

func (h *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Level.String()+" "+r.Message)
	return nil
}
func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCounter) WithGroup(string) slog.Handler      { return h }

// count returns how many records at level or above mention substr.
func (h *logCounter) count(minLevel slog.Level, substr string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.records {
		var lvl slog.Level
		_ = lvl.UnmarshalText([]byte(strings.Fields(r)[0]))
		if lvl >= minLevel && strings.Contains(r, substr) {
			n++
		}
	}
	return n
}

// scriptCalls counts the script commands a client sends (each Redis attempt
// of the limiter).
type scriptCalls struct{ n atomic.Int64 }

func (h *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// metricValue reads one gauge or counter from reg; labels are name, value
// pairs that must all match.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s %v not found", name, labels)
	return 0
}

type sharedFixture struct {
	srv     *redistest.Server
	client  *redis.Client
	shared  *Shared
	logs    *logCounter
	calls   *scriptCalls
	reg     *prometheus.Registry
	account string
}

// sharedReplicas starts a Redis server of its own and returns it, the
// configuration (100/s, burst 5) and a function that starts one more
// replica's Shared limiter (2 senders) of one account on it.
func sharedReplicas(t *testing.T) (*redistest.Server, Config, func() *Shared) {
	t.Helper()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	cfg := Config{Global: Rate{PerSecond: 100, Burst: 5}}
	account := redistest.Prefix(t)
	return srv, cfg, func() *Shared { return newShared(t, srv, account, cfg, 2).shared }
}

// newShared returns a Shared limiter on a private redis-server (to kill).
func newShared(t *testing.T, srv *redistest.Server, account string, cfg Config, maxSenders int) *sharedFixture {
	t.Helper()
	f := &sharedFixture{srv: srv, logs: &logCounter{}, calls: &scriptCalls{}, reg: prometheus.NewRegistry(), account: account}
	f.client = redis.NewClient(productionOptions(srv.Addr))
	f.client.AddHook(f.calls)
	f.shared = sharedOn(t, f.client, account, cfg, SharedConfig{MaxSenders: maxSenders, Logger: slog.New(f.logs), Registerer: f.reg})
	return f
}

// sharedOn returns a Shared limiter for account on client (closed when the
// test ends), sc completed with the Redis limiter.
func sharedOn(t *testing.T, client *redis.Client, account string, cfg Config, sc SharedConfig) *Shared {
	t.Helper()
	t.Cleanup(func() { _ = client.Close() })
	r, err := NewRedis(client, account, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sc.Redis = r
	s, err := NewShared(sc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSharedFallbackAndRecovery: Redis killed → decisions come from the
// local fallback at target/max_senders (never fail open), the mode change
// is logged once; Redis back → shared again within about a second.
func TestSharedFallbackAndRecovery(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	cfg := Config{Global: Rate{PerSecond: 200, Burst: 8}, Classes: map[string]Rate{"marketing": {PerSecond: 100, Burst: 4}}}
	f := newShared(t, srv, redistest.Prefix(t), cfg, 4) // fallback: 50/s burst 2
	s := f.shared
	if d, err := s.Reserve(bg, Request{Cost: 1}); err != nil || !d.Allowed || d.Mode != ModeShared {
		t.Fatalf("with Redis up: %+v %v", d, err)
	}
	// The fallback's clock stands still, so that the reserved send times
	// below are exact (no scheduling jitter of this loaded machine).
	clock := &fakeClock{}
	clock.us.Store(1_000_000)
	s.fallback.clock = clock.now
	srv.Kill()

	var sends []int64
	for i := range 30 {
		d, err := s.Reserve(bg, Request{Cost: 1, MaxWait: time.Second})
		if err != nil {
			t.Fatalf("reservation %d with Redis down: %v", i, err)
		}
		if d.Mode != ModeFallback {
			t.Fatalf("reservation %d with Redis down: mode %s", i, d.Mode)
		}
		if d.Allowed {
			sends = append(sends, clock.now()+d.Delay.Microseconds())
		}
	}
	// 50/s with max_wait 1s, starting spent: 50 − 1 slots fit, all asked.
	if len(sends) != 30 {
		t.Fatalf("%d grants of 30 within 1s at 50/s", len(sends))
	}
	if msg := overshoot(sends, 50, 2); msg != "" {
		t.Fatalf("fallback exceeded 200/4 = 50/s: %s", msg)
	}
	if s.Mode() != ModeFallback {
		t.Fatalf("mode %s with Redis down", s.Mode())
	}
	if got := metricValue(t, f.reg, "smsgw_limiter_mode", "mode", "fallback"); got != 1 {
		t.Fatalf("mode gauge fallback = %v", got)
	}
	if n := f.logs.count(slog.LevelWarn, ""); n != 1 {
		t.Fatalf("%d warnings for one outage, want the mode change logged once: %v", n, f.logs.records)
	}

	if got := metricValue(t, f.reg, "smsgw_limiter_decisions_total", "mode", "fallback", "result", "allowed"); got != float64(len(sends)) {
		t.Fatalf("fallback grants counted %v, want %d", got, len(sends))
	}

	srv.Start()
	back := time.Now()
	// A patience, not a latency: the limiter retries Redis once a second,
	// so it is back within a couple of seconds on an idle machine (the
	// logged figure); one that never retries stays in fallback for good.
	for s.Mode() != ModeShared {
		if time.Since(back) > 5*time.Second {
			t.Fatalf("still %s %s after Redis came back", s.Mode(), time.Since(back))
		}
		if _, err := s.Reserve(bg, Request{Cost: 1}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("shared again %s after Redis came back", time.Since(back))
	if d, err := s.Reserve(bg, Request{Cost: 1, MaxWait: time.Second}); err != nil || d.Mode != ModeShared {
		t.Fatalf("after recovery: %+v %v", d, err)
	}
	if n := f.logs.count(slog.LevelInfo, "redis is back"); n != 1 {
		t.Fatalf("recovery logged %d times", n)
	}
}

// TestSharedRetriesRedisAtMostOncePerSecond: while Redis is down, callers
// decide locally and only one probe a second reaches Redis. The bound is
// counted on the time the decisions took, however slow the machine.
func TestSharedRetriesRedisAtMostOncePerSecond(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	f := newShared(t, srv, redistest.Prefix(t), Config{Global: Rate{PerSecond: 1000, Burst: 10}}, 2)
	srv.Kill()
	f.calls.n.Store(0)
	start := time.Now()
	calls := 0
	// At least 100 decisions over at least 2.2 s: two probes' worth.
	for calls < 100 || time.Since(start) < 2200*time.Millisecond {
		if _, err := f.shared.Reserve(bg, Request{Cost: 1}); err != nil {
			t.Fatal(err)
		}
		calls++
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	// The first failure, then at most one probe per second begun.
	if n, most := f.calls.n.Load(), 2+int64(took/redisRetryEvery); n > most {
		t.Fatalf("%d Redis attempts for %d decisions in %s, want at most %d: one a second", n, calls, took, most)
	}
}

// TestSharedPauseHoldsWhenRedisDies: a pause set through Redis holds in
// every replica that has seen it, after Redis dies and after Redis comes
// back empty.
func TestSharedPauseHoldsWhenRedisDies(t *testing.T) {
	t.Parallel()
	srv, _, replica := sharedReplicas(t)
	a, b := replica(), replica()
	if err := a.Pause(bg, 4*time.Second); err != nil {
		t.Fatal(err)
	}
	if d, err := b.Reserve(bg, Request{Cost: 1}); err != nil || !d.Paused || d.Mode != ModeShared {
		t.Fatalf("b while a paused: %+v %v", d, err)
	}
	srv.Kill() // no persistence: the pause key is gone for good
	for name, s := range map[string]*Shared{"a": a, "b": b} {
		d, err := s.Reserve(bg, Request{Cost: 1, MaxWait: time.Hour})
		if err != nil || d.Allowed || !d.Paused || d.RetryAfter < 2*time.Second {
			t.Fatalf("%s with Redis down during the pause: %+v %v", name, d, err)
		}
	}
	srv.Start()
	for name, s := range map[string]*Shared{"a": a, "b": b} {
		deadline := time.Now().Add(2500 * time.Millisecond)
		for s.Mode() != ModeShared {
			if time.Now().After(deadline) {
				t.Fatalf("%s not shared again", name)
			}
			_, _ = s.State(bg) // probes Redis through the breaker
			time.Sleep(20 * time.Millisecond)
		}
		d, err := s.Reserve(bg, Request{Cost: 1})
		if err != nil || d.Allowed || !d.Paused {
			t.Fatalf("%s after Redis came back without the pause key: %+v %v", name, d, err)
		}
		st, err := s.State(bg)
		if err != nil || st.Mode != ModeShared || st.PauseRemaining <= 0 {
			t.Fatalf("%s state %+v %v", name, st, err)
		}
	}
}

// TestSharedState: State reports the shared schedule while Redis answers
// and the divided fallback limits when it does not.
func TestSharedState(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	cfg := Config{Global: Rate{PerSecond: 10, Burst: 5}, Classes: map[string]Rate{"marketing": {PerSecond: 5, Burst: 2}}}
	f := newShared(t, srv, redistest.Prefix(t), cfg, 2)
	for range 3 {
		if _, err := f.shared.Reserve(bg, Request{Class: "marketing", Cost: 1, MaxWait: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := f.shared.State(bg)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode != ModeShared || len(st.Keys) != 2 || st.Keys[1].Name != "marketing" {
		t.Fatalf("state %+v", st)
	}
	// marketing: 3 units at 5/s → 600 ms ahead; global 3 at 10/s → the
	// third was booked at marketing's send time (200 ms) + 100 ms.
	if a := st.Keys[1].Ahead; a < 500*time.Millisecond || a > 600*time.Millisecond {
		t.Errorf("marketing %s ahead, want about 600ms", a)
	}
	if a := st.Keys[0].Ahead; a < 200*time.Millisecond || a > 300*time.Millisecond {
		t.Errorf("global %s ahead, want about 300ms", a)
	}
	f.srv.Kill()
	st, err = f.shared.State(bg)
	if err != nil || st.Mode != ModeFallback || st.Keys[0].Rate.PerSecond != 5 {
		t.Fatalf("state with Redis down: %+v %v", st, err)
	}
}

// TestResume: an operator's resume ends the pause here and on Redis.
func TestResume(t *testing.T) {
	t.Parallel()
	_, cfg, replica := sharedReplicas(t)
	a := replica()
	if err := a.Pause(bg, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := a.Resume(bg); err != nil {
		t.Fatal(err)
	}
	fresh := replica()
	for name, s := range map[string]*Shared{"resumed": a, "fresh replica": fresh} {
		if d, err := s.Reserve(bg, Request{Cost: 1}); err != nil || !d.Allowed {
			t.Fatalf("%s after resume: %+v %v", name, d, err)
		}
	}
	l, _ := newFakeLocal(t, cfg)
	_ = l.Pause(bg, time.Minute)
	_ = l.Resume(bg)
	if d, _ := l.Reserve(bg, Request{Cost: 1}); !d.Allowed {
		t.Fatalf("local after resume: %+v", d)
	}
}

// TestSharedHastyNeverProbes: Redis stops answering (frozen: every call
// waits for its timeout, as when its host is gone). Once the breaker
// lets a probe through, a hasty request (the OTP fast path) is still
// decided locally at once, without a Redis call: the probe, a Redis
// timeout, is left to the other callers and Probe. It does not cost an
// OTP its deadline.
func TestSharedHastyNeverProbes(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	f := newShared(t, srv, redistest.Prefix(t), Config{Global: Rate{PerSecond: 100, Burst: 4}}, 2)
	s := f.shared
	if d, err := s.Reserve(bg, Request{Cost: 1}); err != nil || d.Mode != ModeShared {
		t.Fatalf("with Redis up: %+v %v", d, err)
	}
	srv.Freeze()
	t.Cleanup(srv.Thaw)
	// A caller that may wait pays the first timeout and opens the breaker.
	if d, err := s.Reserve(bg, Request{Cost: 1, MaxWait: time.Second}); err != nil || d.Mode != ModeFallback {
		t.Fatalf("first reservation with Redis frozen: %+v %v", d, err)
	}
	// Wait until the breaker would let the next caller probe Redis.
	for s.br.cb.State() != gobreaker.StateHalfOpen {
		time.Sleep(10 * time.Millisecond)
	}
	f.calls.n.Store(0)
	d, err := s.Reserve(bg, Request{Cost: 1, MaxWait: time.Second, Hasty: true})
	if err != nil || !d.Allowed || d.Mode != ModeFallback {
		t.Fatalf("hasty reservation in fallback: %+v %v", d, err)
	}
	if n := f.calls.n.Load(); n != 0 {
		t.Fatalf("a hasty reservation in fallback made %d Redis calls (it was the breaker's probe); want none", n)
	}
	if st := s.br.cb.State(); st != gobreaker.StateHalfOpen {
		t.Fatalf("breaker %s after a hasty reservation; want the probe still left to another caller", st)
	}
}

// TestSharedRedisCallLeavesTheCallerTime: Redis stops answering while
// the breaker is still closed, and a caller with a deadline reserves (an
// OTP: 1 s). The Redis call takes at most an eighth of the time left (the
// breaker's own timeout here is longer than the deadline), the failure
// opens the breaker for everyone, and the fallback's slot lies within the
// caller's MaxWait counted from when it asked, not from after the failed
// call: a later slot would be past the deadline.
func TestSharedRedisCallLeavesTheCallerTime(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	// A client that honours its context's deadline, as the gateway's.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, ReadTimeout: time.Minute})
	t.Cleanup(func() { _ = c.Close() })
	r, err := NewRedis(c, redistest.Prefix(t), Config{Global: Rate{PerSecond: 4, Burst: 2}})
	if err != nil {
		t.Fatal(err)
	}
	// Fallback: one slot per 500 ms. The breaker's own timeout is longer
	// than the deadline: only the caller's share can end the call in time.
	s, err := NewShared(SharedConfig{Redis: r, MaxSenders: 2, RedisTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := s.Reserve(bg, Request{Cost: 1}); err != nil || d.Mode != ModeShared {
		t.Fatalf("with Redis up: %+v %v", d, err)
	}
	srv.Freeze()
	t.Cleanup(srv.Thaw)
	const deadline = 2 * time.Second
	ctx, cancel := context.WithTimeout(bg, deadline)
	defer cancel()
	asked := time.Now()
	// The fallback starts spent: its first slot is 500 ms away, inside a
	// MaxWait of 600 ms from now but not from after a 250 ms Redis call.
	d, err := s.Reserve(ctx, Request{Cost: 1, MaxWait: 600 * time.Millisecond, Hasty: true})
	if err != nil {
		t.Fatalf("reservation as Redis stops answering: %v; want a decision before the caller's deadline", err)
	}
	if s.Mode() != ModeFallback {
		t.Fatalf("mode %s after a call found Redis gone; want the breaker open", s.Mode())
	}
	if d.Allowed && time.Since(asked)+d.Delay > 600*time.Millisecond+50*time.Millisecond {
		t.Fatalf("granted a slot %s after the caller asked; want none later than its MaxWait 600ms", time.Since(asked)+d.Delay)
	}
}

// slowRedis makes every command and pipeline of a client wait d first (a
// distant or busy Redis), or until the command's context ends.
type slowRedis struct{ d time.Duration }

func (h slowRedis) wait(ctx context.Context) error {
	t := time.NewTimer(h.d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (h slowRedis) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h slowRedis) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.wait(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (h slowRedis) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.wait(ctx); err != nil {
			return err
		}
		return next(ctx, cmds)
	}
}

// newDeadlineShared returns a Shared limiter (fallback at half the rate)
// on a client with the gateway's options (a context's deadline bounds each
// command) and hooks.
func newDeadlineShared(t *testing.T, addr string, cfg Config, hooks ...redis.Hook) *Shared {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialerRetries: 1})
	for _, h := range hooks {
		c.AddHook(h)
	}
	return sharedOn(t, c, redistest.Prefix(t), cfg, SharedConfig{MaxSenders: 2})
}

// TestSharedFreshConnectionDecidesOnRedis: every Redis command takes
// 25 ms, and the first decision runs on a fresh connection of a Redis that
// does not hold the script yet: the dial's handshake and the NOSCRIPT
// answer before the EVAL make it about five round trips, which an eighth
// of a 600 ms deadline (75 ms) does not hold. The call gets minRedisCall
// instead, Redis decides, and the replica stays on the shared schedule.
func TestSharedFreshConnectionDecidesOnRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	s := newDeadlineShared(t, srv.Addr, Config{Global: Rate{PerSecond: 100, Burst: 4}}, slowRedis{d: 25 * time.Millisecond})
	ctx, cancel := context.WithTimeout(bg, 600*time.Millisecond)
	defer cancel()
	d, err := s.Reserve(ctx, Request{Cost: 1, MaxWait: 100 * time.Millisecond})
	if err != nil || !d.Allowed || d.Mode != ModeShared {
		t.Fatalf("first decision on a fresh connection, 25 ms a command: %+v %v; want a grant from Redis", d, err)
	}
	if m := s.Mode(); m != ModeShared {
		t.Fatalf("mode %s after Redis answered; want shared", m)
	}
}

// TestSharedHurriedCallerKeepsTheReplicaShared: Redis stops answering and
// a caller with 280 ms left reserves. Its call gets 245 ms (it keeps an
// eighth), less than minRedisCall: the timeout says nothing about Redis,
// so the breaker stays closed for the others, and that caller is refused
// with a deadline error (its answer a 503), not granted a local slot
// beside the shared schedule the others still use.
func TestSharedHurriedCallerKeepsTheReplicaShared(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	s := newDeadlineShared(t, srv.Addr, Config{Global: Rate{PerSecond: 100, Burst: 4}})
	if d, err := s.Reserve(bg, Request{Cost: 1}); err != nil || d.Mode != ModeShared {
		t.Fatalf("with Redis up: %+v %v", d, err)
	}
	srv.Freeze()
	t.Cleanup(srv.Thaw)
	ctx, cancel := context.WithTimeout(bg, 280*time.Millisecond)
	defer cancel()
	d, err := s.Reserve(ctx, Request{Cost: 1, MaxWait: time.Second})
	if !errors.Is(err, context.DeadlineExceeded) || d.Allowed {
		t.Fatalf("hurried caller with Redis frozen: %+v %v; want no slot and a deadline error", d, err)
	}
	if m := s.Mode(); m != ModeShared {
		t.Fatalf("mode %s after a hurried caller's call timed out; want the breaker closed for the others", m)
	}
	if st := s.br.cb.State(); st != gobreaker.StateClosed {
		t.Fatalf("breaker %s; want closed", st)
	}
}
