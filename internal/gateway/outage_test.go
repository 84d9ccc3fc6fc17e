package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/provider/sim"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

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
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 10 * time.Second})
	defer func() { _ = c.Close() }()
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	defer func() { _ = probe.Close() }()
	if err := probe.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	storedAfter, want := 0, 1 // the first message; each keyed iteration adds one, an unkeyed one if stored
	for _, key := range []string{"stall-1", ""} {
		// idle connections in the gateway's pool, so that the write goes
		// out on one instead of waiting for a new one's handshake.
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { h.get("/v1/messages/"+first, keyNotify) })
		}
		wg.Wait()
		slept := make(chan error, 1)
		go func() { slept <- c.Do(context.Background(), "DEBUG", "SLEEP", "2").Err() }()
		eventually(t, "Redis to stall", func() bool { return probe.Ping(t.Context()).Err() != nil })
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
