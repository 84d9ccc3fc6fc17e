package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/httpapi"
	"smsgw/internal/opsview"
	"smsgw/internal/provider/sim"
	"smsgw/internal/queue"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

// storeSections are the sections of the stats answer read from the store.
var storeSections = []string{httpapi.SectionClasses, httpapi.SectionCounters, httpapi.SectionCallbacks, httpapi.SectionProtection}

// statsAnswer is one stats answer (checked against the spec by get), 200
// or not: decoded, and as raw members to tell absent from zero.
func (h *harness) statsAnswer() (reply, opsview.StatsResponse, map[string]map[string]json.RawMessage) {
	h.t.Helper()
	r := h.get("/v1/admin/stats", keyAdmin)
	var st opsview.StatsResponse
	raw := map[string]map[string]json.RawMessage{}
	if r.status != http.StatusOK {
		return r, st, raw
	}
	r.json(h.t, &st)
	var top map[string]json.RawMessage
	r.json(h.t, &top)
	for k, v := range top {
		var m map[string]json.RawMessage
		if json.Unmarshal(v, &m) != nil {
			m = map[string]json.RawMessage{} // not an object (unavailable)
		}
		raw[k] = m
	}
	return r, st, raw
}

// wantSections checks which top-level members an answer has: every one of
// the replica's own, and of the store's exactly those not unavailable.
func wantSections(t *testing.T, raw map[string]map[string]json.RawMessage, unavailable []string) {
	t.Helper()
	for _, k := range []string{"unavailable", "limiter", "pause", "provider", "otp", "replica"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("member %q missing", k)
		}
	}
	for _, k := range storeSections {
		if _, ok := raw[k]; ok == slices.Contains(unavailable, k) {
			t.Errorf("member %q present %v with unavailable %v", k, ok, unavailable)
		}
	}
	counted := !slices.Contains(unavailable, httpapi.SectionCounters)
	for _, f := range []struct{ section, field string }{
		{"provider", "sent_per_second"}, {"provider", "throttled_total"}, {"otp", "unavailable_total"},
	} {
		if _, ok := raw[f.section][f.field]; ok != counted {
			t.Errorf("%s.%s present %v with unavailable %v", f.section, f.field, ok, unavailable)
		}
	}
	for _, f := range []string{"throttled_in_window", "suspend_after", "guard_active", "target_rps"} {
		if _, ok := raw["provider"][f]; !ok {
			t.Errorf("provider.%s missing: it is this replica's own", f)
		}
	}
	if _, ok := raw["otp"]["replica_unavailable_total"]; !ok {
		t.Error("otp.replica_unavailable_total missing: it is this replica's own")
	}
}

// TestStatsRedisDownAnswersWhatItKnows: with its Redis stopped the gateway
// answers the stats 200 with this replica's own view (the limiter in
// fallback, the pause, OTP latency, the provider, the replica), leaves out
// the sections kept in Redis, never shown as zeros, and names them in
// unavailable; once Redis is back the answer is whole again.
func TestStatsRedisDownAnswersWhatItKnows(t *testing.T) {
	h, srv := startOwnRedis(t, redistest.ServerOptions{})
	// An OTP on the fast path gives this replica a latency to show.
	wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
	if st := h.stats(); st.Limiter.Mode != "shared" || st.OTP.LatencySamples != 1 {
		t.Fatalf("before the outage: limiter %q, %d OTP latencies; want shared, 1", st.Limiter.Mode, st.OTP.LatencySamples)
	}

	srv.Stop()
	r, st, raw := h.statsAnswer()
	wantStatus(t, r, http.StatusOK)
	if !slices.Equal(st.Unavailable, storeSections) {
		t.Errorf("unavailable %v, want %v", st.Unavailable, storeSections)
	}
	wantSections(t, raw, st.Unavailable)
	if st.Limiter.Mode != "fallback" || st.Replica.LimiterMode != "fallback" || len(st.Limiter.Keys) == 0 {
		t.Errorf("limiter %+v, replica limiter mode %q: want the fallback's state", st.Limiter, st.Replica.LimiterMode)
	}
	if st.OTP.LatencySamples != 1 || st.OTP.LatencyP99MS == nil || st.Replica.Mode != "redis" || st.Replica.Owner == "" ||
		st.Provider.SuspendAfter != h.cfg.Dispatch.SuspensionGuard.Threshold || st.Pause.Paused {
		t.Errorf("this replica's view: otp %+v replica %+v provider %+v pause %+v", st.OTP, st.Replica, st.Provider, st.Pause)
	}
	// One WARN line for the answer, naming the sections.
	lines := grepLines(h.logs.String(), "stats: answered without")
	if n := strings.Count(lines, "\n") + 1; lines == "" || n != 1 {
		t.Fatalf("%d log lines for one partial answer, want 1:\n%s", n, lines)
	}
	for _, want := range append([]string{`"level":"WARN"`}, storeSections...) {
		if !strings.Contains(lines, want) {
			t.Errorf("log line lacks %s: %s", want, lines)
		}
	}

	srv.Start()
	eventually(t, "a whole answer once Redis is back", func() bool {
		r, st, _ = h.statsAnswer()
		return r.status == http.StatusOK && len(st.Unavailable) == 0 && st.Limiter.Mode == "shared"
	})
	_, st, raw = h.statsAnswer()
	wantSections(t, raw, st.Unavailable)
	if !strings.Contains(string(r.body), `"unavailable":[]`) || st.Classes["otp"].SentTotal != 1 {
		t.Errorf("after the outage: %s", r.body)
	}
}

// TestStatsRedisStalledAnswersWithinATimeout: a Redis that stops answering
// (DEBUG SLEEP) costs the stats answer about one redis.timeout, not one
// per read with go-redis's retries: the store's reads share one deadline
// and the limiter falls back beside them.
func TestStatsRedisStalledAnswersWithinATimeout(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{Args: []string{"--enable-debug-command", "local"}})
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, redisMode, s.URL())
	cfg.Redis.Addr = srv.Addr
	cfg.Redis.Timeout = 500 * time.Millisecond
	h := startWith(t, cfg, s)
	h.stats() // whole; the pool has connections

	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 10 * time.Second})
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	defer func() { _ = probe.Close() }()
	if err := probe.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	slept := make(chan error, 1)
	go func() { slept <- c.Do(context.Background(), "DEBUG", "SLEEP", "3").Err() }()
	// Registered after the harness: runs before the gateway stops.
	t.Cleanup(func() {
		if err := <-slept; err != nil {
			t.Errorf("DEBUG SLEEP: %v", err)
		}
		_ = c.Close()
	})
	eventually(t, "Redis to stall", func() bool { return probe.Ping(t.Context()).Err() != nil })

	begin := time.Now()
	r, st, raw := h.statsAnswer()
	took := time.Since(begin)
	wantStatus(t, r, http.StatusOK)
	if bound := cfg.Redis.Timeout * 3 / 2; took > bound {
		t.Errorf("answered after %v with Redis stalled; want about one redis.timeout (%v), at most %v", took, cfg.Redis.Timeout, bound)
	}
	if !slices.Equal(st.Unavailable, storeSections) || st.Limiter.Mode != "fallback" {
		t.Errorf("unavailable %v, limiter %q; want %v and fallback", st.Unavailable, st.Limiter.Mode, storeSections)
	}
	wantSections(t, raw, st.Unavailable)
	t.Logf("answered in %v with Redis stalled (redis.timeout %v)", took, cfg.Redis.Timeout)
}

// TestStatsWholeAnswer: with the store answering, unavailable is [] and
// every section is there, in both modes.
func TestStatsWholeAnswer(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, nil)
			r, st, raw := h.statsAnswer()
			wantStatus(t, r, http.StatusOK)
			if !strings.Contains(string(r.body), `"unavailable":[]`) || st.Unavailable == nil || len(st.Unavailable) != 0 {
				t.Errorf("unavailable %v in %s, want []", st.Unavailable, r.body)
			}
			wantSections(t, raw, st.Unavailable)
			if len(st.Classes) != len(sms.Classes) {
				t.Errorf("classes %v", st.Classes)
			}
		})
	}
}

// TestStatsQueueDownLeavesOutClassesOnly: the queue's figures failing
// takes away the classes (depths and totals are shown together) and
// nothing else: the counters, callbacks and protection were read.
func TestStatsQueueDownLeavesOutClassesOnly(t *testing.T) {
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, embeddedMode, s.URL())
	app, err := New(t.Context(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	app.srv.Store.Queue = failingStatsQueue{app.srv.Store.Queue} // before Start: no handler runs yet
	if err := app.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	h := &harness{t: t, app: app, sim: s, base: "http://" + app.Addr(), cfg: cfg, client: &http.Client{Transport: tr, Timeout: 20 * time.Second}}
	r, st, raw := h.statsAnswer()
	wantStatus(t, r, http.StatusOK)
	if !slices.Equal(st.Unavailable, []string{httpapi.SectionClasses}) {
		t.Errorf("unavailable %v, want [classes]", st.Unavailable)
	}
	wantSections(t, raw, st.Unavailable)
	if st.Counters == nil || st.Counters.Scope != opsview.ScopeProcess || st.Protection == nil || st.Callbacks == nil {
		t.Errorf("counters %+v protection %+v callbacks %+v", st.Counters, st.Protection, st.Callbacks)
	}
}

// failingStatsQueue is a queue whose figures cannot be read (its disk
// fails); everything else works.
type failingStatsQueue struct{ queue.Queue }

func (failingStatsQueue) Stats(context.Context) (map[sms.Class]queue.ClassStats, error) {
	return nil, fmt.Errorf("read queue figures: %w", syscall.EIO)
}
