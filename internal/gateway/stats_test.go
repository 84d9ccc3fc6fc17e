package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/opsview"
	"smsgw/internal/provider"
	"smsgw/internal/provider/sim"
	"smsgw/internal/queue"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// pollOK reads GET path, as key, into out until done says so; every
// answer must be 200.
func (h *harness) pollOK(t testing.TB, what, path, key string, out any, done func() bool) {
	t.Helper()
	eventually(t, what, func() bool {
		g := h.get(path, key)
		wantStatus(t, g, http.StatusOK)
		g.json(t, out)
		return done()
	})
}

// stats is a whole stats answer: every section read (unavailable empty).
func (h *harness) stats() opsview.StatsResponse {
	h.t.Helper()
	r := h.get("/v1/admin/stats", keyAdmin)
	wantStatus(h.t, r, http.StatusOK)
	var st opsview.StatsResponse
	r.json(h.t, &st)
	if len(st.Unavailable) != 0 {
		h.t.Fatalf("a partial stats answer (unavailable %v): %s", st.Unavailable, r.body)
	}
	return st
}

// TestStatsFiguresFollowTraffic: every new figure of the stats answer
// starts at zero and moves with real traffic through the simulator: sends,
// permanent failures, fast-path OTPs, a provider 429 and the 503 it causes.
func TestStatsFiguresFollowTraffic(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, func(c *config.Config) { c.Dispatch.MaxAttempts = 1 })
		st := h.stats()
		for c, cs := range st.Classes {
			if cs.SentTotal+cs.FailedTotal+cs.ExpiredTotal+cs.DeadTotal != 0 {
				t.Errorf("class %s starts at %+v", c, cs)
			}
		}
		wantScope := map[mode]string{embeddedMode: opsview.ScopeProcess, redisMode: opsview.ScopeShared}[m]
		wantLimiter := map[mode]string{embeddedMode: "local", redisMode: "shared"}[m]
		pv := st.Provider
		if st.Counters.Scope != wantScope || pv.RateScope != wantScope || pv.TargetRPS != 90 || pv.ContractRPS != 100 ||
			pv.SuspendAfter != 300 || pv.WindowSeconds != 600 || pv.GuardActivateAt != 150 || pv.GuardActive ||
			*pv.ThrottledTotal != 0 || pv.ThrottledInWindow != 0 || pv.Name == "" {
			t.Errorf("fresh counters %+v provider %+v", st.Counters, pv)
		}
		if st.OTP.LatencyP99MS != nil || st.OTP.LatencySamples != 0 || *st.OTP.UnavailableTotal != 0 ||
			st.OTP.ReplicaUnavailableTotal != 0 {
			t.Errorf("fresh otp %+v", st.OTP)
		}
		rep := st.Replica
		if rep.Owner == "" || rep.Mode != string(m) || rep.LimiterMode != wantLimiter || rep.UptimeSeconds < 0 ||
			time.Since(rep.StartedAt) > time.Minute || time.Since(st.Counters.Since) > time.Minute {
			t.Errorf("replica %+v counters %+v", rep, st.Counters)
		}

		// Queued sends: 3 transactional sent; then, the provider
		// failing, 1 marketing dead after its one attempt.
		for range 3 {
			wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
		}
		// The fast path: two OTPs sent now.
		for range 2 {
			wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
		}
		eventually(t, "the sends counted", func() bool { return h.stats().Classes["transactional"].SentTotal == 3 })
		fail := 1.0
		if err := h.sim.Apply(sim.Control{FailRate: &fail}); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, h.post("/v1/messages", keyNotify, msg("marketing")), http.StatusAccepted)
		// The stats handler reads the queue before the counters, so one
		// answer may count a dead letter whose lease it saw a moment
		// earlier: wait for an answer that shows both.
		eventually(t, "the dead letter counted", func() bool {
			st = h.stats()
			return st.Classes["marketing"].DeadTotal == 1 && st.Classes["marketing"].Dead == 1
		})
		if err := h.sim.Apply(sim.Control{Clear: true}); err != nil {
			t.Fatal(err)
		}
		if c := st.Classes["marketing"]; c.SentTotal != 0 || c.Dead != 1 || c.FailedTotal != 0 {
			t.Errorf("marketing %+v, want 1 dead letter and nothing sent", c)
		}
		if c := st.Classes["otp"]; c.SentTotal != 2 || c.FailedTotal != 0 {
			t.Errorf("otp %+v, want 2 sent (fast path)", c)
		}
		if st.OTP.LatencySamples != 2 || st.OTP.LatencyP50MS == nil || st.OTP.LatencyP99MS == nil ||
			*st.OTP.LatencyP99MS < *st.OTP.LatencyP50MS || *st.OTP.LatencyP99MS <= 0 || *st.OTP.LatencyP99MS > 1000 {
			t.Errorf("otp latency %+v", st.OTP)
		}
		eventually(t, "a send rate", func() bool { return *h.stats().Provider.SentPerSecond > 0 })

		// The provider throttles: the OTP answers 503, the 429 is
		// counted, and the guard's window holds it.
		for1s := sim.Duration(time.Second)
		if err := h.sim.Apply(sim.Control{ThrottleAllFor: &for1s}); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusServiceUnavailable)
		st = h.stats()
		if *st.Provider.ThrottledTotal != 1 || st.Provider.ThrottledInWindow != 1 || *st.OTP.UnavailableTotal != 1 ||
			st.OTP.ReplicaUnavailableTotal != 1 {
			t.Errorf("after one 429: provider %+v otp %+v", st.Provider, st.OTP)
		}
	})
}

// TestStatsNeverCountAheadOfTheQueue: an outcome counted in a stats answer
// is in that answer's queue figures too. The dead letter is made to land
// between the answer's two reads (after the queue's, before the counters'
// if the queue were read first); the answer must not show it counted while
// the queue still shows the message leased.
func TestStatsNeverCountAheadOfTheQueue(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		s := newSim(t, sim.Config{})
		cfg := testConfig(t, m, s.URL())
		cfg.Dispatch.MaxAttempts = 1
		prov := &gatedProvider{entered: make(chan struct{}, 1), release: make(chan struct{})}
		app, err := New(t.Context(), cfg, Options{Provider: prov})
		if err != nil {
			t.Fatal(err)
		}
		hooked := &statsHookQueue{Queue: app.desk.Queue}
		app.desk.Queue = hooked // before Start: no handler runs yet (the stats answer reads the queue through the desk)
		startApp(t, app)
		h := &harness{t: t, app: app, sim: s, base: "http://" + app.Addr(), cfg: cfg,
			client: &http.Client{Timeout: 20 * time.Second}}

		wantStatus(t, h.post("/v1/messages", keyNotify, msg("marketing")), http.StatusAccepted)
		select {
		case <-prov.entered: // leased and at the provider
		case <-time.After(15 * time.Second):
			t.Fatal("timed out waiting for the send")
		}
		var ran atomic.Bool
		hook := func() {
			ran.Store(true)
			close(prov.release) // the send fails; MaxAttempts 1 makes it a dead letter
			if !waitFor(func() bool { return app.desk.Live.Snap().Classes[sms.ClassMarketing].Dead == 1 }) {
				t.Error("timed out waiting for the dead letter to be counted")
			}
		}
		hooked.after.Store(&hook)
		c := h.stats().Classes["marketing"]
		if !ran.Load() {
			t.Fatal("the stats answer did not read the queue")
		}
		if c.DeadTotal > c.Dead {
			t.Errorf("marketing %+v: a dead letter counted that the queue does not show", c)
		}
		eventually(t, "the dead letter in both figures", func() bool {
			c = h.stats().Classes["marketing"]
			return c.Dead == 1 && c.DeadTotal == 1 && c.Leased == 0
		})
	})
}

// statsHookQueue runs after (once) right after the queue's figures were
// read for a stats answer.
type statsHookQueue struct {
	queue.Queue
	after atomic.Pointer[func()]
}

func (q *statsHookQueue) Stats(ctx context.Context) (map[sms.Class]queue.ClassStats, error) {
	st, err := q.Queue.Stats(ctx)
	if f := q.after.Swap(nil); f != nil {
		(*f)()
	}
	return st, err
}

// gatedProvider holds every send until release is closed, then fails it
// temporarily (a 503).
type gatedProvider struct {
	entered chan struct{}
	release chan struct{}
}

func (p *gatedProvider) Name() string { return "gated" }

func (p *gatedProvider) Send(ctx context.Context, _ *provider.Request) (provider.Result, error) {
	select {
	case p.entered <- struct{}{}:
	default:
	}
	select {
	case <-p.release:
		return provider.Result{}, &provider.Error{Reason: provider.ReasonUnavailable, Temporary: true, Status: http.StatusServiceUnavailable, Message: "gated"}
	case <-ctx.Done():
		return provider.Result{}, ctx.Err()
	}
}

// waitFor is eventually for goroutines other than the test's: false when
// cond did not hold in time.
func waitFor(cond func() bool) bool {
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// TestSharedCountersAcrossReplicas: with Redis every replica reports the
// account's totals, whichever replica sent; and a stopped replica's last
// sends are not lost.
func TestSharedCountersAcrossReplicas(t *testing.T) {
	a, b := twoReplicas(t, nil)
	wantStatus(t, a.post("/v1/admin/pause", keyAdmin, nil), http.StatusOK)
	eventually(t, "b to see the pause", func() bool { return b.stats().Pause.Paused })
	// Sent by a alone, on the fast path (b's dispatcher never sees them).
	wantStatus(t, a.post("/v1/admin/resume", keyAdmin, nil), http.StatusOK)
	eventually(t, "a to see the resume", func() bool { return !a.stats().Pause.Paused })
	// A denial during the pause holds a's sends back a little longer
	// (pausedRetry): until then an OTP is refused, and nothing is sent.
	sent := 0
	eventually(t, "a to send 4 OTPs after the resume", func() bool {
		if a.post("/v1/otp", keyLogin, otpBody()).status == http.StatusOK {
			sent++
		}
		return sent == 4
	})
	eventually(t, "replica b to report a's sends", func() bool {
		st := b.stats()
		return st.Classes["otp"].SentTotal == 4 && st.Counters.Scope == opsview.ScopeShared
	})
	if st := b.stats(); st.OTP.LatencySamples != 0 {
		t.Errorf("b reports %d OTP latencies; latency is per replica and b sent none", st.OTP.LatencySamples)
	}
	if st := a.stats(); st.Classes["otp"].SentTotal != 4 || st.Replica.Owner == b.stats().Replica.Owner {
		t.Errorf("a reports %d otp sent; owners %q, %q", st.Classes["otp"].SentTotal, st.Replica.Owner, b.stats().Replica.Owner)
	}
	// One more from a, then a stops at once: its final flush carries it.
	wantStatus(t, a.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
	if err := a.app.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := b.stats().Classes["otp"].SentTotal; got != 5 {
		t.Errorf("after a stopped b reports %d otp sent, want 5", got)
	}
}

func TestAdminGetMessage(t *testing.T) {
	h := start(t, embeddedMode, nil)
	r := h.post("/v1/messages", keyNotify, msg("transactional", "reference", "order-9"))
	wantStatus(t, r, http.StatusAccepted)
	var a httpapi.AcceptedMessage
	r.json(t, &a)
	var v httpapi.AdminMessage
	h.pollOK(t, "the message sent", "/v1/admin/messages/"+a.ID, keyAdmin, &v, func() bool { return v.Status == sms.StatusSent })
	if v.ID != a.ID || v.Producer != "notify" || v.Reference != "order-9" || v.To != sms.MaskPhone("+819012345678") ||
		!strings.Contains(v.To, "*") || v.ProviderMessageID == "" {
		t.Errorf("admin view %+v", v)
	}
	wantStatus(t, h.get("/v1/admin/messages/"+a.ID, keyNotify), http.StatusForbidden)
	wantStatus(t, h.get("/v1/admin/messages/"+a.ID, ""), http.StatusUnauthorized)
	wantStatus(t, h.get("/v1/admin/messages/"+sms.NewID(time.Now()), keyAdmin), http.StatusNotFound)
	wantStatus(t, h.get("/v1/admin/messages/not-an-id", keyAdmin), http.StatusNotFound)
}

func TestLatencyWindowQuantiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		add      []int // ms
		size     int
		p50, p99 time.Duration
		n        int
	}{
		{"empty", nil, 10, 0, 0, 0},
		{"one", []int{7}, 10, 7 * time.Millisecond, 7 * time.Millisecond, 1},
		{"1..100", seq(1, 100), 100, 50 * time.Millisecond, 99 * time.Millisecond, 100},
		{"only the last window counts", append(seq(1000, 1100), seq(1, 100)...), 100, 50 * time.Millisecond, 99 * time.Millisecond, 100},
		{"negative clamps to 0", []int{-5}, 10, 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := opsview.NewLatencyWindow(tc.size)
			for _, v := range tc.add {
				w.Add(time.Duration(v) * time.Millisecond)
			}
			q, n := w.Quantiles(0.5, 0.99)
			if n != tc.n {
				t.Fatalf("n %d, want %d", n, tc.n)
			}
			if n > 0 && (q[0] != tc.p50 || q[1] != tc.p99) {
				t.Errorf("p50 %v p99 %v, want %v %v", q[0], q[1], tc.p50, tc.p99)
			}
		})
	}
}

func seq(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// TestCounterFields: every counter of the stats answer is one field of the
// counters store, and a store accepts the set (its key, with the account's
// tag, is asserted in internal/state).
func TestCounterFields(t *testing.T) {
	t.Parallel()
	fields := opsview.TotalsFields()
	if n := len(fields); n != 4*len(sms.Classes)+2+int(admission.NRefusals) {
		t.Errorf("%d counter fields: %v", n, fields)
	}
	if _, err := state.NewLocalCounters(fields); err != nil {
		t.Fatal(err)
	}
	var tt opsview.Totals
	tt.Classes[sms.ClassOTP].Sent, tt.Throttled, tt.Refused[admission.RefusedSuppressed] = 3, 2, 4
	if got := opsview.TotalsFrom(tt.Values()); got != tt || len(tt.Values()) != 3 {
		t.Errorf("round trip of %+v through the store fields: %+v (%v)", tt, got, tt.Values())
	}
}

// storeSections are the sections of the stats answer read from the store.
var storeSections = []string{opsview.SectionClasses, opsview.SectionCounters, opsview.SectionCallbacks, opsview.SectionProtection}

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
	counted := !slices.Contains(unavailable, opsview.SectionCounters)
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

// stallRedis puts the Redis server at addr to sleep for seconds (DEBUG
// SLEEP: the whole server stops answering) and returns once a probe finds
// it stalled; slept then receives the sleep's answer when Redis wakes.
// warm, when set, first runs four times at once, leaving idle connections
// in the gateway's pool, so that its next command goes out on one and
// waits for Redis instead of for a new connection's handshake.
func stallRedis(t *testing.T, addr string, seconds int, warm func()) (slept chan error) {
	t.Helper()
	if warm != nil {
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(warm)
		}
		wg.Wait()
	}
	probe := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	defer func() { _ = probe.Close() }()
	if err := probe.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: time.Duration(seconds+10) * time.Second})
	slept = make(chan error, 1)
	go func() {
		defer func() { _ = c.Close() }()
		slept <- c.Do(context.Background(), "DEBUG", "SLEEP", strconv.Itoa(seconds)).Err()
	}()
	eventually(t, "Redis to stall", func() bool { return probe.Ping(t.Context()).Err() != nil })
	return slept
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

	slept := stallRedis(t, srv.Addr, 3, nil)
	// Registered after the harness: runs before the gateway stops.
	t.Cleanup(func() {
		if err := <-slept; err != nil {
			t.Errorf("DEBUG SLEEP: %v", err)
		}
	})

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
	eachMode(t, func(t *testing.T, m mode) {
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
	app.desk.Queue = failingStatsQueue{app.desk.Queue} // before Start: no handler runs yet
	startApp(t, app)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	h := &harness{t: t, app: app, sim: s, base: "http://" + app.Addr(), cfg: cfg, client: &http.Client{Transport: tr, Timeout: 20 * time.Second}}
	r, st, raw := h.statsAnswer()
	wantStatus(t, r, http.StatusOK)
	if !slices.Equal(st.Unavailable, []string{opsview.SectionClasses}) {
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

// TestEveryEndpointRedisDown: with Redis stopped, every endpoint that
// needs it answers 503 with Retry-After, never a 500.
// The OTP fast path keeps its local fallback, so it may also answer 200.
// GET /v1/admin/stats answers 200 with what it could read instead
// (TestStatsRedisDownAnswersWhatItKnows).
func TestEveryEndpointRedisDown(t *testing.T) {
	h, srv := startOwnRedis(t, redistest.ServerOptions{})
	r := h.post("/v1/messages", keyNotify, msg("transactional"))
	wantStatus(t, r, http.StatusAccepted)
	id := accepted(t, r).ID
	// Its send and the send's acknowledgement are over before Redis goes:
	// an acknowledgement still owed would be retried until Stop gives up
	// on it, and the test is about the endpoints, not about that.
	eventually(t, "the first message sent and acknowledged", func() bool {
		g := h.get("/v1/messages/"+id, keyNotify)
		return g.status == http.StatusOK && strings.Contains(string(g.body), `"status":"sent"`)
	})
	srv.Stop()
	batch := map[string]any{"messages": []any{msg("transactional"), msg("transactional")}}
	invalidBatch := map[string]any{"messages": []any{msg("transactional", "to", "nope")}}
	for _, tc := range []struct {
		name  string
		r     req
		okToo bool // the OTP fast path may still send
	}{
		{"message", req{method: "POST", path: "/v1/messages", key: keyNotify, body: msg("transactional")}, false},
		{"message with key", req{method: "POST", path: "/v1/messages", key: keyNotify, body: msg("transactional"),
			header: map[string]string{"Idempotency-Key": "outage-1"}}, false},
		{"batch", req{method: "POST", path: "/v1/messages/batch", key: keyNotify, body: batch}, false},
		{"batch with key", req{method: "POST", path: "/v1/messages/batch", key: keyNotify, body: batch,
			header: map[string]string{"Idempotency-Key": "outage-2"}}, false},
		{"invalid batch with key", req{method: "POST", path: "/v1/messages/batch", key: keyNotify, body: invalidBatch,
			header: map[string]string{"Idempotency-Key": "outage-3"}}, false},
		{"get message", req{method: "GET", path: "/v1/messages/" + id, key: keyNotify}, false},
		{"get unknown message", req{method: "GET", path: "/v1/messages/" + sms.NewID(time.Now()), key: keyNotify}, false},
		{"otp", req{method: "POST", path: "/v1/otp", key: keyLogin, body: otpBody("deadline_ms", 2000)}, true},
		{"otp with key", req{method: "POST", path: "/v1/otp", key: keyLogin, body: otpBody("deadline_ms", 2000),
			header: map[string]string{"Idempotency-Key": "outage-4"}}, false},
		{"admin history", req{method: "GET", path: "/v1/admin/history", key: keyAdmin}, true},
		{"admin message", req{method: "GET", path: "/v1/admin/messages/" + id, key: keyAdmin}, false},
		{"admin pause", req{method: "POST", path: "/v1/admin/pause", key: keyAdmin, body: map[string]any{"duration_seconds": 5}}, false},
		{"admin resume", req{method: "POST", path: "/v1/admin/resume", key: keyAdmin}, false},
		{"admin dead letters", req{method: "GET", path: "/v1/admin/dead-letters", key: keyAdmin}, false},
		{"admin retry", req{method: "POST", path: "/v1/admin/dead-letters/" + id + "/retry", key: keyAdmin}, false},
		{"readyz", req{method: "GET", path: "/readyz"}, false},
		{"admin add suppression", req{method: "POST", path: "/v1/admin/suppressions", key: keyAdmin, body: map[string]any{"to": "+819012345678"}}, false},
		{"admin remove suppression", req{method: "DELETE", path: "/v1/admin/suppressions/+819012345678", key: keyAdmin}, false},
		{"admin list suppressions", req{method: "GET", path: "/v1/admin/suppressions", key: keyAdmin}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.with(t).do(tc.r)
			if tc.okToo && r.status < 300 {
				return
			}
			if r.status != http.StatusServiceUnavailable {
				t.Fatalf("status %d, want 503; body %s", r.status, r.body)
			}
			ra, err := strconv.Atoi(r.header.Get("Retry-After"))
			if err != nil || ra < 1 {
				t.Errorf("Retry-After %q, want whole seconds >= 1", r.header.Get("Retry-After"))
			}
			p := r.problem(t)
			// only a refused message may say nothing was queued; an admin
			// change may have been applied.
			if d, _ := p["detail"].(string); strings.HasPrefix(tc.r.path, "/v1/admin/") && strings.Contains(d, "queued") {
				t.Errorf("admin answer %q speaks of queueing", d)
			}
		})
	}
	wantStatus(t, h.get("/healthz", ""), http.StatusOK)
}

// TestMessageRedisSlow: a Redis that stops answering (CLIENT PAUSE) makes
// POST /v1/messages answer 503 with Retry-After once redis.timeout passes.
func TestMessageRedisSlow(t *testing.T) {
	h, srv := startOwnRedis(t, redistest.ServerOptions{})
	wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer func() { _ = c.Close() }()
	if err := c.Do(t.Context(), "CLIENT", "PAUSE", "4000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	r := h.post("/v1/messages", keyNotify, msg("transactional"), "Idempotency-Key", "slow-1")
	wantStatus(t, r, http.StatusServiceUnavailable)
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	if err := c.Do(t.Context(), "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
}

// TestMessageStoredAfterTimeout: Redis stops answering (DEBUG SLEEP: the
// whole server stalls) after the enqueue script went out; the gateway
// gives up at redis.timeout, and Redis runs the script when it wakes, so
// the message is stored and will be sent. The 503 must not say "nothing
// was queued" (a producer retrying without a key would send it twice): it
// says the message may be queued and names the id it has, and a retry
// with the same Idempotency-Key answers that message. A write go-redis
// had to open a connection for never went out (the connection's handshake
// timed out first): then nothing is stored, and the keyed retry stores it
// once. Either way the provider sees each message once.
func TestMessageStoredAfterTimeout(t *testing.T) {
	h, srv := startOwnRedis(t, redistest.ServerOptions{Args: []string{"--enable-debug-command", "local"}})
	first := accepted(t, h.post("/v1/messages", keyNotify, msg("transactional"))).ID
	storedAfter, want := 0, 1 // the first message; each keyed iteration adds one, an unkeyed one if stored
	for _, key := range []string{"stall-1", ""} {
		// idle connections in the gateway's pool, so that the write goes
		// out on one instead of waiting for a new one's handshake.
		slept := stallRedis(t, srv.Addr, 2, func() { h.get("/v1/messages/"+first, keyNotify) })
		var header []string
		if key != "" {
			header = []string{"Idempotency-Key", key}
		}
		r := h.post("/v1/messages", keyNotify, msg("transactional"), header...)
		wantStatus(t, r, http.StatusServiceUnavailable)
		var p struct {
			Detail string `json:"detail"`
			ID     string `json:"id"`
		}
		if err := json.Unmarshal(r.body, &p); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(p.Detail, "may be queued") || !sms.ValidID(p.ID) || r.header.Get("Retry-After") == "" {
			t.Fatalf("503 for an unconfirmed write: detail %q, id %q, Retry-After %q; want 'may be queued', the message id and a Retry-After",
				p.Detail, p.ID, r.header.Get("Retry-After"))
		}
		if err := <-slept; err != nil {
			t.Fatal(err)
		}
		// Redis ran what reached it as it woke, before this GET.
		stored := h.get("/v1/messages/"+p.ID, keyNotify).status == http.StatusOK
		if stored {
			storedAfter++
			if key == "" {
				want++
			}
			eventually(t, "the message Redis stored after the answer to be sent", func() bool {
				g := h.get("/v1/messages/"+p.ID, keyNotify)
				return g.status == http.StatusOK && strings.Contains(string(g.body), `"status":"sent"`)
			})
		}
		if key == "" {
			continue
		}
		want++
		again := h.post("/v1/messages", keyNotify, msg("transactional"), header...)
		wantStatus(t, again, http.StatusAccepted)
		if got := accepted(t, again).ID; stored && got != p.ID {
			t.Errorf("the keyed retry answered %s, want the id the 503 named, %s", got, p.ID)
		}
	}
	t.Logf("%d of 2 writes reached Redis during the stall and were stored after the 503", storedAfter)
	eventually(t, "every stored message sent", func() bool { return h.sim.Stats().Accepted == want })
	if st := h.sim.Stats(); st.Duplicates != 0 {
		t.Errorf("the provider saw %d duplicates", st.Duplicates)
	}
}

// TestOTPSentDuringOutageRecordedAfter: with Redis down the fast path
// still sends OTPs at the fallback rate, but their sent records cannot be
// stored then. They are written once Redis is back, so the OTP has a
// status like any message (before, the one write failed and GET answered
// 404 for good, and its receipt and callbacks were lost).
func TestOTPSentDuringOutageRecordedAfter(t *testing.T) {
	h, srv := startOwnRedis(t, redistest.ServerOptions{})
	wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusOK) // Redis up: the limiter is shared
	srv.Stop()
	var id string
	eventually(t, "an OTP sent at the fallback rate", func() bool {
		r := h.post("/v1/otp", keyLogin, otpBody("to", "+819012340001", "deadline_ms", 2000))
		if r.status != http.StatusOK {
			return false
		}
		var sent httpapi.OTPSent
		if err := json.Unmarshal(r.body, &sent); err != nil {
			t.Fatal(err)
		}
		id = sent.ID
		return true
	})
	const failed, retried = "smsgw_api_otp_record_failures_total", "smsgw_api_otp_record_retries_total"
	eventually(t, "a write of the OTP's record to fail and be put off", func() bool {
		return metricValues(h.metrics(), retried)[retried] >= 1
	})
	if g := h.get("/v1/messages/"+id, keyLogin); g.status == http.StatusOK {
		t.Fatalf("the OTP's record was stored while Redis was down: %s", g.body)
	}
	srv.Start()
	eventually(t, "the OTP's record stored once Redis is back", func() bool {
		g := h.get("/v1/messages/"+id, keyLogin)
		return g.status == http.StatusOK && strings.Contains(string(g.body), `"status":"sent"`)
	})
	if v := metricValues(h.metrics(), failed, retried); v[failed] != 0 || v[retried] < 1 {
		t.Errorf("OTP records given up %v, retried %v; want none given up, at least one retried", v[failed], v[retried])
	}
}

// startOwnRedis starts the gateway in Redis mode on a Redis of its own
// (started with opts, to stop, stall or kill), with redis.timeout 200 ms.
func startOwnRedis(t *testing.T, opts redistest.ServerOptions) (*harness, *redistest.Server) {
	t.Helper()
	srv := redistest.StartServer(t, opts)
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, redisMode, s.URL())
	cfg.Redis.Addr = srv.Addr
	cfg.Redis.Timeout = 200 * time.Millisecond
	return startWith(t, cfg, s), srv
}

// TestEnqueueWithStoreDownIs503: a POST while Redis does not answer (an
// outage, a Cluster master dead before its replica is promoted) is a 503
// with Retry-After, never a 500. It was a 500: the store's network error
// was not recognised as a dependency that is down.
func TestEnqueueWithStoreDownIs503(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	h := start(t, redisMode, func(c *config.Config) { c.Redis.Addr = srv.Addr })
	srv.Kill()
	for _, path := range []string{"/v1/messages", "/v1/messages/batch"} {
		body := msg("transactional")
		if path == "/v1/messages/batch" {
			body = map[string]any{"messages": []any{msg("transactional")}}
		}
		r := h.post(path, keyNotify, body)
		if path == "/v1/messages/batch" && r.status == http.StatusMultiStatus {
			continue // per item; the item's own status is checked by the batch tests
		}
		wantStatus(t, r, http.StatusServiceUnavailable)
		if r.header.Get("Retry-After") == "" {
			t.Errorf("%s: 503 without Retry-After", path)
		}
		if p := r.problem(t); p["type"] != httpapi.ProblemTypeBase+"unavailable" {
			t.Errorf("%s: problem %v", path, p)
		}
	}
}

// With redis.wait_replicas and no replica to confirm, a POST is a 503 with
// Retry-After (the message may be stored; the producer retries).
func TestEnqueueNotReplicatedIs503(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	h := start(t, redisMode, func(c *config.Config) { c.Redis.Addr, c.Redis.WaitReplicas = srv.Addr, 1 })
	r := h.post("/v1/messages", keyNotify, msg("transactional"))
	wantStatus(t, r, http.StatusServiceUnavailable)
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	p := r.problem(t)
	if d, _ := p["detail"].(string); !strings.Contains(d, "may be queued") {
		t.Errorf("detail %q, want it to say the message may be queued", d)
	}
	if id, _ := p["id"].(string); !sms.ValidID(id) {
		t.Errorf("id %q, want the id the message has if it was stored", id)
	}
}
