package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"smsgw/internal/admission"
	"smsgw/internal/logtest"
	"smsgw/internal/provider/sim"
	"smsgw/internal/queue"
	"smsgw/internal/redistest"
)

// TestStopStack: closers run last pushed first, all of them even after a
// failure, which is logged with its name; a queue already closed is not a
// failure; the stack is empty afterwards.
func TestStopStack(t *testing.T) {
	t.Parallel()
	var order []string
	step := func(name string, err error) func() error {
		return func() error { order = append(order, name); return err }
	}
	var logs logtest.Buffer
	var s stopStack
	s.push("redis client", step("redis client", nil))
	s.push("queue", step("queue", queue.ErrClosed))
	s.push("coalescer", step("coalescer", errors.New("boom")))
	err := s.run(slog.New(slog.NewTextHandler(&logs, nil)))
	if got := strings.Join(order, ","); got != "coalescer,queue,redis client" {
		t.Errorf("order %s, want the reverse of the pushes", got)
	}
	if err == nil || !strings.Contains(err.Error(), "close coalescer: boom") || strings.Contains(err.Error(), "queue") {
		t.Errorf("error %v, want only the coalescer's, named", err)
	}
	if !strings.Contains(logs.String(), "step=coalescer") || strings.Contains(logs.String(), "step=queue") {
		t.Errorf("log %q, want the failing step named, and only it", logs.String())
	}
	order = nil
	if err := s.run(slog.New(slog.DiscardHandler)); err != nil || len(order) != 0 {
		t.Errorf("second run: %v, ran %v; want nothing left", err, order)
	}
}

// TestNewStartsNothing: New starts no goroutine of its own in either mode
// (the coalescer, the pause poller and the totals loop start in Start), and
// an App stopped without Start closes what New opened. What opening a
// store or a Redis client runs inside it (the embedded store's commit
// loop, go-redis's housekeeping) is theirs, not the App's.
func TestNewStartsNothing(t *testing.T) {
	s := newSim(t, sim.Config{})
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			cfg := testConfig(t, m, s.URL())
			before := goleak.IgnoreCurrent()
			app, err := New(t.Context(), cfg, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := goleak.Find(before,
				goleak.IgnoreTopFunction("smsgw/internal/queue/embedded.(*Queue).commitLoop"),
				goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"),
			); err != nil {
				t.Errorf("New started goroutines: %v", err)
			}
			if err := app.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			if _, err := app.b.queue.Stats(t.Context()); !errors.Is(err, queue.ErrClosed) {
				t.Errorf("queue after Stop without Start: %v, want ErrClosed", err)
			}
		})
	}
}

// TestFailedNewClosesWhatItOpened: when New fails after the store is open
// (here the dispatcher's metrics clash), the store is closed again: the
// next New on the same directory gets its file lock.
func TestFailedNewClosesWhatItOpened(t *testing.T) {
	t.Parallel()
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, embeddedMode, s.URL())
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "smsgw_dispatch_takes_total", Help: "clash"}))
	if _, err := New(t.Context(), cfg, Options{Registerer: reg}); err == nil || !strings.Contains(err.Error(), "dispatcher") {
		t.Fatalf("New with a clashing registry: %v, want the dispatcher's error", err)
	}
	app, err := New(t.Context(), cfg, Options{})
	if err != nil {
		t.Fatalf("New after a failed New on the same store: %v", err)
	}
	if err := app.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestRedisUnreachableAtStartup: a replica whose Redis does not answer at
// start-up starts (it does not crash-loop through an outage) but is not
// silent about it: the persistence check is logged at ERROR with the
// reason, /readyz is 503 naming it, the metric says unchecked; once Redis
// answers the check runs, /readyz turns 200 and the metric says what it
// found (no AOF here).
func TestRedisUnreachableAtStartup(t *testing.T) {
	t.Parallel()
	srv, s, cfg := redisToStop(t)
	srv.Stop()
	h := startWith(t, cfg, s)
	if !strings.Contains(h.logs.String(), `"level":"ERROR","msg":"could not check whether Redis persists the queue`) {
		t.Errorf("no ERROR log of the failed persistence check:\n%s", h.logs.String())
	}
	r := h.get("/readyz", "")
	wantStatus(t, r, http.StatusServiceUnavailable)
	if checks, _ := r.problem(t)["checks"].(map[string]any); checks["persistence"] != "fail" {
		t.Errorf("readyz %s, want the persistence check failing", r.body)
	}
	if m := h.metrics(); !strings.Contains(m, `smsgw_queue_redis_persistence{state="unchecked"} 1`) {
		t.Errorf("metrics lack the unchecked persistence:\n%s", grepLines(m, "persistence"))
	}
	// Producer quotas are decided locally meanwhile, and counted.
	for range 3 {
		h.post("/v1/otp", keyLogin, otpBody("deadline_ms", 2000))
	}
	if m := h.metrics(); !strings.Contains(m, `smsgw_limiter_ingress_mode{mode="fallback"} 1`) ||
		!strings.Contains(m, "smsgw_api_ingress_fallback_total 3") {
		t.Errorf("ingress with Redis down:\n%s", grepLines(m, "ingress"))
	}

	srv.Start()
	eventually(t, "/readyz to turn ready", func() bool { return h.get("/readyz", "").status == http.StatusOK })
	if m := h.metrics(); !strings.Contains(m, `smsgw_queue_redis_persistence{state="none"} 1`) ||
		!strings.Contains(m, `smsgw_queue_redis_persistence{state="unchecked"} 0`) {
		t.Errorf("after Redis answered, metrics say:\n%s", grepLines(m, "persistence"))
	}
	if !strings.Contains(h.logs.String(), "REDIS DOES NOT PERSIST THE QUEUE") {
		t.Error("Redis without AOF was not reported once it answered")
	}
}

// TestPersistenceCheckedAtStart: with Redis up, Start asks once and the
// metric says what Redis does.
func TestPersistenceCheckedAtStart(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{AppendOnly: true})
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, redisMode, s.URL())
	cfg.Redis.Addr = srv.Addr
	h := startWith(t, cfg, s)
	if m := h.metrics(); !strings.Contains(m, `smsgw_queue_redis_persistence{state="appendonly"} 1`) {
		t.Errorf("metrics:\n%s", grepLines(m, "persistence"))
	}
	wantStatus(t, h.get("/readyz", ""), http.StatusOK)
}

// TestPausePollerRunOnce: another replica's pause reaches this one on the
// next poll; a failed read keeps the last state and is logged once.
func TestPausePollerRunOnce(t *testing.T) {
	t.Parallel()
	srv, _, cfg := redisToStop(t)
	var logs logtest.Buffer
	d, _, err := newDeps(Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	a, err := newRedisBackend(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.stops.run(d.log) })
	b, err := newRedisBackend(cfg, deps{log: d.log, reg: prometheus.NewRegistry(), now: time.Now, metrics: d.metrics})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.stops.run(d.log) })
	poller := admission.NewPausePoller(b.pause, time.Hour, d.log)
	ctx := context.Background()
	// As the ticker bounds each run by the period.
	poll := func() error {
		ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		return poller.RunOnce(ctx)
	}
	if err := a.pause.Pause(ctx, time.Minute, "maintenance"); err != nil {
		t.Fatal(err)
	}
	if b.pause.Active(time.Now()) {
		t.Fatal("b paused before it polled")
	}
	if err := poll(); err != nil {
		t.Fatal(err)
	}
	if st := b.pause.State(); !st.Paused || st.Reason != "maintenance" || st.Until == nil {
		t.Fatalf("b after a poll: %+v", st)
	}
	srv.Stop()
	for range 3 {
		if err := poll(); err == nil {
			t.Fatal("a poll of a stopped Redis succeeded")
		}
	}
	if st := b.pause.State(); !st.Paused {
		t.Fatal("a failed poll dropped the known pause")
	}
	if n := strings.Count(logs.String(), "cannot read the shared switch"); n != 1 {
		t.Errorf("%d warnings for one outage, want 1", n)
	}
	srv.Start()
	if err := a.pause.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := poll(); err != nil {
		t.Fatal(err)
	}
	if b.pause.State().Paused || !strings.Contains(logs.String(), "reading the shared switch again") {
		t.Errorf("after Redis came back and a resume: %+v", b.pause.State())
	}
}

func (h *harness) metrics() string {
	h.t.Helper()
	r := h.get("/metrics", "")
	wantStatus(h.t, r, http.StatusOK)
	return string(r.body)
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
