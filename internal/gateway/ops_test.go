package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/keyspace"
	"smsgw/internal/logtest"
	"smsgw/internal/opsview"
	"smsgw/internal/provider/sim"
	"smsgw/internal/queue"
	"smsgw/internal/queue/redisq"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
	"smsgw/internal/sms/smstest"
)

// TestReadyzUnreadyFromStop: /readyz answers 503 as soon as Stop begins,
// while the listener still serves (DrainDelay), and 200 before.
func TestReadyzUnreadyFromStop(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		s := newSim(t, sim.Config{})
		cfg := testConfig(t, m, s.URL())
		app, err := New(t.Context(), cfg, Options{DrainDelay: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := app.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		h := &harness{t: t, app: app, sim: s, base: "http://" + app.Addr(), cfg: cfg, client: &http.Client{Timeout: 5 * time.Second}}
		r := h.get("/readyz", "")
		wantStatus(t, r, http.StatusOK)
		if !strings.Contains(string(r.body), `"store":"ok"`) || !strings.Contains(string(r.body), `"limiter":"ok"`) {
			t.Errorf("readyz %s", r.body)
		}
		stopped := make(chan error, 1)
		go func() { stopped <- app.Stop(context.Background()) }()
		eventually(t, "readyz to turn unready", func() bool { return h.get("/readyz", "").status == http.StatusServiceUnavailable })
		wantStatus(t, h.get("/healthz", ""), http.StatusOK) // still serving while draining
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, h.base+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			t.Error("still listening after Stop")
		}
		h.client.CloseIdleConnections()
	})
}

func TestAdminPauseStatsDeadLetters(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) {
		c.Dispatch.MaxAttempts = 1
	})
	p := h.post("/v1/admin/pause", keyAdmin, map[string]any{"duration_seconds": 60, "reason": "provider maintenance"})
	wantStatus(t, p, http.StatusOK)
	var ps admission.PauseState
	p.json(t, &ps)
	if !ps.Paused || ps.Until == nil || ps.Reason != "provider maintenance" {
		t.Errorf("pause %+v", ps)
	}
	wantStatus(t, h.post("/v1/admin/pause", keyAdmin, map[string]any{"duration_seconds": 0}), http.StatusBadRequest)
	for range 3 {
		wantStatus(t, h.post("/v1/messages", keyNotify, msg("marketing")), http.StatusAccepted)
	}
	time.Sleep(300 * time.Millisecond)
	var st opsview.StatsResponse
	h.get("/v1/admin/stats", keyAdmin).json(t, &st)
	if q := st.Classes["marketing"]; q.Ready+q.Leased != 3 || !st.Pause.Paused || st.Limiter.Mode != "local" {
		t.Errorf("stats %+v", st)
	}
	if n := len(h.sim.Accepted()); n != 0 {
		t.Fatalf("sent %d while paused", n)
	}

	// Every send fails (transient); with max_attempts 1 each is a dead letter.
	fail := 1.0
	if err := h.sim.Apply(sim.Control{FailRate: &fail}); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, h.post("/v1/admin/resume", keyAdmin, nil), http.StatusOK)
	var dl httpapi.DeadLettersResponse
	eventually(t, "three dead letters", func() bool {
		r := h.get("/v1/admin/dead-letters?limit=10", keyAdmin)
		wantStatus(t, r, http.StatusOK)
		r.json(t, &dl)
		return len(dl.Messages) == 3
	})
	d := dl.Messages[0]
	if d.Producer != "notify" || d.Status != "failed" || d.LastError == "" || strings.Contains(d.To, "12345678") {
		t.Errorf("dead letter %+v (recipient must be masked)", d)
	}
	wantStatus(t, h.get("/v1/admin/dead-letters?limit=0", keyAdmin), http.StatusBadRequest)

	zero := 0.0
	if err := h.sim.Apply(sim.Control{FailRate: &zero}); err != nil {
		t.Fatal(err)
	}
	r := h.post("/v1/admin/dead-letters/"+d.ID+"/retry", keyAdmin, nil)
	wantStatus(t, r, http.StatusAccepted)
	eventually(t, "the retried dead letter to be sent", func() bool { return sentRefs(h.sim)[d.ID] == 1 })
	wantStatus(t, h.post("/v1/admin/dead-letters/"+d.ID+"/retry", keyAdmin, nil), http.StatusNotFound)
	wantStatus(t, h.post("/v1/admin/dead-letters/nope/retry", keyAdmin, nil), http.StatusNotFound)
}

// TestAdminPauseIsShared: a pause set on one replica stops sending on the
// other; resume on the other lifts it everywhere.
func TestAdminPauseIsShared(t *testing.T) {
	a, b := twoReplicas(t, nil)
	wantStatus(t, a.post("/v1/admin/pause", keyAdmin, nil), http.StatusOK)
	eventually(t, "replica b to see the pause", func() bool {
		var st opsview.StatsResponse
		b.get("/v1/admin/stats", keyAdmin).json(t, &st)
		return st.Pause.Paused
	})
	r := b.post("/v1/otp", keyLogin, otpBody("deadline_ms", 100))
	wantStatus(t, r, http.StatusServiceUnavailable)
	wantStatus(t, b.post("/v1/admin/resume", keyAdmin, nil), http.StatusOK)
	eventually(t, "replica a to see the resume", func() bool {
		var st opsview.StatsResponse
		a.get("/v1/admin/stats", keyAdmin).json(t, &st)
		return !st.Pause.Paused
	})
	time.Sleep(2 * admission.PausedRetry)
	wantStatus(t, a.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
}

func TestClientIPFromTrustedProxiesOnly(t *testing.T) {
	s := &httpapi.Server{Edge: httpapi.Edge{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}}}
	for _, tc := range []struct {
		remote, xff, want string
	}{
		{"203.0.113.7:1234", "", "203.0.113.7"},
		{"203.0.113.7:1234", "198.51.100.1", "203.0.113.7"},                  // untrusted peer: header ignored
		{"10.1.2.3:1234", "198.51.100.1", "198.51.100.1"},                    // one trusted proxy
		{"10.1.2.3:1234", "6.6.6.6, 198.51.100.1, 10.9.9.9", "198.51.100.1"}, // spoofed left part ignored
		{"10.1.2.3:1234", "", "10.1.2.3"},
		{"10.1.2.3:1234", "garbage, 198.51.100.1", "198.51.100.1"},
		{"10.1.2.3:1234", "198.51.100.1, garbage", "10.1.2.3"},
		{"[::1]:1234", "2001:db8::1", "2001:db8::1"},
	} {
		r := httptest.NewRequestWithContext(t.Context(), "GET", "/", nil)
		r.RemoteAddr = tc.remote
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		if got := s.ResolveClientIP(r); got != tc.want {
			t.Errorf("remote %s XFF %q: %s, want %s", tc.remote, tc.xff, got, tc.want)
		}
	}
}

// TestUnknownErrorIs500WithoutDetail: an unexpected error reaches the
// client as a bare 500 and the log in full; a panic likewise.
func TestUnknownErrorIs500WithoutDetail(t *testing.T) {
	var logs logtest.Buffer
	m, err := opsview.NewAPIMetrics(newRegistry(), httpapi.KindLabels())
	if err != nil {
		t.Fatal(err)
	}
	s := &httpapi.Server{Log: slog.New(slog.NewJSONHandler(&logs, nil)), Metrics: m}
	h := s.RequestID(s.Recoverer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic("secret-panic-value")
		}
		s.WriteError(w, r, errors.New("dial tcp 10.0.0.5:6379: secret-internal-detail"))
	})))
	for _, path := range []string{"/err", "/panic"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), "GET", path, nil))
		body := rec.Body.String()
		if rec.Code != 500 || strings.Contains(body, "secret") || !strings.Contains(body, `"type":"urn:smsgw:problem:internal"`) {
			t.Errorf("%s: %d %s", path, rec.Code, body)
		}
	}
	if !strings.Contains(logs.String(), "secret-internal-detail") || !strings.Contains(logs.String(), "secret-panic-value") {
		t.Errorf("log lacks the detail: %s", logs.String())
	}
}

// TestRedisCluster: with several addresses the App runs on Redis Cluster;
// every key it touches shares the account's hash tag, so queue, limiter,
// ingress, idempotency and pause scripts all work there.
func TestRedisCluster(t *testing.T) {
	addrs := redistest.StartCluster(t)
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, redisMode, s.URL())
	cfg.Redis.Addr = strings.Join(addrs, ",")
	h := startWith(t, cfg, s)
	r := h.post("/v1/messages", keyNotify, msg("transactional"), "Idempotency-Key", "k1")
	wantStatus(t, r, http.StatusAccepted)
	again := h.post("/v1/messages", keyNotify, msg("transactional"), "Idempotency-Key", "k1")
	wantStatus(t, again, http.StatusAccepted)
	if again.header.Get("Idempotent-Replayed") != "true" {
		t.Error("no replay on Cluster")
	}
	var a httpapi.AcceptedMessage
	r.json(t, &a)
	eventually(t, "the send", func() bool { return sentRefs(s)[a.ID] == 1 })
	wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
	wantStatus(t, h.post("/v1/admin/pause", keyAdmin, map[string]any{"duration_seconds": 5}), http.StatusOK)
	wantStatus(t, h.post("/v1/admin/resume", keyAdmin, nil), http.StatusOK)
	wantStatus(t, h.get("/readyz", ""), http.StatusOK)
}

func TestDashboardHook(t *testing.T) {
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, embeddedMode, s.URL())
	dash := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("dash " + r.URL.Path)) })
	app, err := New(t.Context(), cfg, Options{Dashboard: dash})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = app.Stop(context.Background()) }()
	rec := httptest.NewRecorder()
	app.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), "GET", "/dashboard/app.js", nil))
	if rec.Code != 200 || rec.Body.String() != "dash /dashboard/app.js" {
		t.Errorf("%d %q", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	app.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), "GET", "/dashboard", nil))
	if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/dashboard/" {
		t.Errorf("%d %v", rec.Code, rec.Header())
	}
}

// TestAccessLogClientIP: the debug access log names the client's address
// (it read an empty one while the middleware that resolves it ran after
// the one that logs).
func TestAccessLogClientIP(t *testing.T) {
	h := start(t, embeddedMode, nil)
	wantStatus(t, h.get("/healthz", ""), http.StatusOK)
	found := false
	for _, line := range strings.Split(h.logs.String(), "\n") {
		var rec struct {
			Msg      string `json:"msg"`
			Route    string `json:"route"`
			ClientIP string `json:"client_ip"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Msg != "http request" || rec.Route != "/healthz" {
			continue
		}
		found = true
		if rec.ClientIP != "127.0.0.1" {
			t.Errorf("access log client_ip %q, want 127.0.0.1: %s", rec.ClientIP, line)
		}
	}
	if !found {
		t.Fatalf("no access log line for /healthz:\n%s", h.logs.String())
	}
}

// TestAdminListener: with admin.listen the operator
// endpoints (/metrics, /v1/admin/*) answer only there, and the producer
// endpoints only on listen; both have the probes.
func TestAdminListener(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) { c.Admin.Listen = "127.0.0.1:0" })
	admin := *h
	admin.base = "http://" + h.app.AdminAddr()
	if h.app.AdminAddr() == "" || admin.base == h.base {
		t.Fatalf("no separate admin listener: %q", h.app.AdminAddr())
	}
	wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
	wantStatus(t, admin.get("/metrics", ""), http.StatusOK)
	wantStatus(t, admin.get("/v1/admin/stats", keyAdmin), http.StatusOK)
	wantStatus(t, admin.get("/v1/admin/stats", ""), http.StatusUnauthorized)
	// routes a listener does not have (checkSpec would want the path's
	// documented statuses): read as they are.
	for _, c := range []struct{ method, url string }{
		{"POST", admin.base + "/v1/messages"}, {"GET", h.base + "/metrics"}, {"GET", h.base + "/v1/admin/stats"},
	} {
		hr, _ := http.NewRequestWithContext(t.Context(), c.method, c.url, strings.NewReader(`{}`))
		hr.Header.Set("Authorization", "Bearer "+keyAdmin)
		resp, err := h.client.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s: %d, want 404", c.method, c.url, resp.StatusCode)
		}
	}
	for _, x := range []harness{*h, admin} {
		wantStatus(t, x.get("/healthz", ""), http.StatusOK)
		wantStatus(t, x.get("/readyz", ""), http.StatusOK)
	}
}

// historyPatience: a count shows once the recorder has run (every 5 s)
// and its step has ended (5 s more), on a busy machine.
const historyPatience = 45 * time.Second

func (h *harness) history() opsview.HistoryResponse {
	h.t.Helper()
	return adminGet[opsview.HistoryResponse](h, "/v1/admin/history")
}

// adminGet is the answer to GET path as the admin, which must be 200.
func adminGet[T any](h *harness, path string) T {
	h.t.Helper()
	r := h.get(path, keyAdmin)
	wantStatus(h.t, r, http.StatusOK)
	var out T
	r.json(h.t, &out)
	return out
}

func sum(v []int64) int64 {
	var n int64
	for _, x := range v {
		n += x
	}
	return n
}

func waitHistory(t *testing.T, h *harness, what string, cond func(opsview.HistoryResponse) bool) opsview.HistoryResponse {
	t.Helper()
	deadline := time.Now().Add(historyPatience)
	for {
		hr := h.history()
		if cond(hr) {
			return hr
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s the history does not show %s: sent %v accepted %v throttled %d drain %+v",
				historyPatience, what, map[string]int64{"otp": sum(hr.Sent["otp"]), "transactional": sum(hr.Sent["transactional"])},
				sum(hr.Accepted["transactional"]), sum(hr.Throttled), hr.Drain)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestAdminHistory: the history answer (checked against the spec) starts
// empty and follows real traffic: queued and fast-path sends, queued
// messages, a provider 429 and the queue depth.
func TestAdminHistory(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, nil)
		wantStatus(t, h.get("/v1/admin/history", ""), http.StatusUnauthorized)
		hr := h.history()
		wantScope := map[mode]string{embeddedMode: opsview.ScopeProcess, redisMode: opsview.ScopeShared}[m]
		if hr.Scope != wantScope || hr.StepSeconds != 5 || len(hr.Throttled) != 180 ||
			!hr.End.Equal(hr.Start.Add(15*time.Minute)) || time.Since(hr.End) > time.Minute || time.Since(hr.End) < 0 {
			t.Fatalf("scope %q, step %gs, %d steps, %s..%s: want %s, 5s, 180 steps ending now",
				hr.Scope, hr.StepSeconds, len(hr.Throttled), hr.Start, hr.End, wantScope)
		}
		if l := hr.Limits; l.ContractRPS != 100 || l.TargetRPS != 90 || len(l.ClassMaxRPS) != 1 || l.ClassMaxRPS["marketing"] != 70 {
			t.Fatalf("limits %+v", l)
		}
		for _, c := range []string{"otp", "transactional", "marketing"} {
			if len(hr.Sent[c]) != 180 || len(hr.Accepted[c]) != 180 || len(hr.Queued[c]) != 180 || sum(hr.Sent[c]) != 0 {
				t.Fatalf("class %s: %d/%d/%d steps, %d sent", c, len(hr.Sent[c]), len(hr.Accepted[c]), len(hr.Queued[c]), sum(hr.Sent[c]))
			}
		}

		for range 3 {
			wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
		}
		for range 2 {
			wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
		}
		// The queued sends are done before the provider throttles, so
		// the one 429 is the OTP's.
		eventually(t, "the transactional sends", func() bool { return h.stats().Classes["transactional"].SentTotal == 3 })
		for1s := sim.Duration(time.Second)
		if err := h.sim.Apply(sim.Control{ThrottleAllFor: &for1s}); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusServiceUnavailable)
		hr = waitHistory(t, h, "3 transactional and 2 OTP sent, 3 queued, one 429", func(hr opsview.HistoryResponse) bool {
			return sum(hr.Sent["transactional"]) == 3 && sum(hr.Sent["otp"]) == 2 &&
				sum(hr.Accepted["transactional"]) == 3 && sum(hr.Throttled) == 1
		})
		if sum(hr.Accepted["otp"]) != 0 || sum(hr.Sent["marketing"]) != 0 {
			t.Errorf("fast-path OTPs counted as queued (%d) or marketing sent (%d)", sum(hr.Accepted["otp"]), sum(hr.Sent["marketing"]))
		}
		var depths int
		for _, q := range hr.Queued["transactional"] {
			if q != nil {
				depths++
			}
		}
		if depths == 0 || hr.Drain == nil || hr.Drain.OverSeconds != 60 || len(hr.Drain.ByClass) != 3 {
			t.Fatalf("%d steps with a queue depth, drain %+v", depths, hr.Drain)
		}
		// Everything was sent: the backlog is empty and drains in 0 s.
		hr = waitHistory(t, h, "an empty backlog", func(hr opsview.HistoryResponse) bool {
			return hr.Drain != nil && hr.Drain.Total.Backlog == 0
		})
		if d := hr.Drain.Total.DrainSeconds; d == nil || *d != 0 {
			t.Errorf("an empty backlog drains in %v, want 0", d)
		}
	})
}

// TestHistorySharedAcrossReplicas: with Redis every replica adds to the
// same steps and reads the same history, whichever replica sent; a
// replica that stops adds its last counts on the way out.
func TestHistorySharedAcrossReplicas(t *testing.T) {
	t.Parallel()
	a, b := twoReplicas(t, nil)
	for range 4 {
		wantStatus(t, a.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
	}
	waitHistory(t, b, "a's 4 OTPs in b's history", func(hr opsview.HistoryResponse) bool { return sum(hr.Sent["otp"]) == 4 })
	wantStatus(t, a.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
	if err := a.app.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitHistory(t, b, "the OTP a sent just before it stopped", func(hr opsview.HistoryResponse) bool { return sum(hr.Sent["otp"]) == 5 })
}

// TestCompactorCompacts: the loop compacts what is due on its first run
// (the final records are then read from the compacted form), and a
// failing Redis is logged once, not on every pass.
func TestCompactorCompacts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	account := redistest.Prefix(t)
	q, err := redisq.New(redisq.Config{Client: redistest.Client(t), Account: account, CompactAfter: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = q.Close() }()
	m := smstest.Message("p", sms.ClassOTP)
	if _, err := q.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	l, _, err := q.Take(ctx, queue.TakeOptions{Owner: "t", Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "SM-1", Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	logs := &logtest.Buffer{}
	c := newCompactor(q, slog.New(slog.NewTextHandler(logs, nil)), nil)
	c.Start(ctx)
	// Started: its first run compacts the one second due: the second's
	// LIST gives way to its compacted STRING, which Get reads.
	sp, err := keyspace.New(account)
	if err != nil {
		t.Fatal(err)
	}
	created, _ := sms.IDTime(m.ID)
	sec := strconv.FormatInt(created.Unix(), 10)
	list, blob := sp.Prefix("q")+"fin:"+sec, sp.Prefix("q")+"fz:"+sec
	rc := redistest.Client(t)
	deadline := time.Now().Add(10 * time.Second)
	for rc.Exists(ctx, list).Val() != 0 || rc.Exists(ctx, blob).Val() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the loop did not compact the second")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, err := q.Get(ctx, m.ID); err != nil || got.Status != sms.StatusSent {
		t.Fatalf("Get of the compacted record = %+v, %v", got, err)
	}
	c.Stop()

	_ = q.Close()
	for range 3 {
		if err := c.runOnce(ctx); err == nil {
			t.Fatal("runOnce on a closed queue succeeded")
		}
	}
	if n := strings.Count(logs.String(), "compaction of final records failed"); n != 1 {
		t.Fatalf("three failed passes logged %d times, want once:\n%s", n, logs)
	}
}
