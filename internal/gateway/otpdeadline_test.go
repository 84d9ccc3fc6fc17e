package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/provider/sim"
	"smsgw/internal/redistest"
)

// TestOTPDeadlineBoundsStoreSteps: deadline_ms bounds the whole fast
// path, the Redis steps before the send too (the idempotency lock, the
// ingress quota). With Redis stalled for longer than the deadline and
// redis.timeout long, the answer is a 503 with Retry-After while Redis
// still sleeps, and nothing is sent then or later. Before, those steps
// waited for Redis (up to redis.timeout, times go-redis's retries): the
// answer came after Redis woke, far past the deadline.
func TestOTPDeadlineBoundsStoreSteps(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{Args: []string{"--enable-debug-command", "local"}})
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, redisMode, s.URL())
	cfg.Redis.Addr = srv.Addr
	cfg.Redis.Timeout = 10 * time.Second // longer than the stall: only the deadline can end the wait
	h := startWith(t, cfg, s)
	wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)

	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 20 * time.Second})
	defer func() { _ = c.Close() }()
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	defer func() { _ = probe.Close() }()
	for _, key := range []string{"", "otp-stall-1"} {
		t.Run("key="+key, func(t *testing.T) {
			// idle connections in the pool: the step's command goes out
			// on one and waits for Redis's answer.
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() { h.get("/v1/messages/none", keyLogin) })
			}
			wg.Wait()
			if err := probe.Ping(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			slept := make(chan error, 1)
			go func() { slept <- c.Do(context.Background(), "DEBUG", "SLEEP", "4").Err() }()
			eventually(t, "Redis to stall", func() bool { return probe.Ping(t.Context()).Err() != nil })
			var header []string
			if key != "" {
				header = []string{"Idempotency-Key", key}
			}
			r := h.post("/v1/otp", keyLogin, otpBody("deadline_ms", 300), header...)
			var woke error
			select {
			case woke = <-slept:
				t.Errorf("the OTP with deadline_ms 300 was answered (%d) only after Redis woke from a 4 s stall", r.status)
				slept <- woke
			default:
			}
			wantStatus(t, r, http.StatusServiceUnavailable)
			var p struct {
				Detail string `json:"detail"`
			}
			if err := json.Unmarshal(r.body, &p); err != nil {
				t.Fatal(err)
			}
			if r.header.Get("Retry-After") == "" || strings.Contains(p.Detail, "may") {
				t.Errorf("503 past the deadline: detail %q, Retry-After %q; want a Retry-After and no 'may have been sent'",
					p.Detail, r.header.Get("Retry-After"))
			}
			t.Logf("detail: %s", p.Detail)
			if err := <-slept; err != nil {
				t.Fatal(err)
			}
		})
	}
	// Redis is back: the next OTP goes out, and only it did.
	wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
	eventually(t, "the OTP after the stall sent", func() bool { return s.Stats().Accepted >= 2 })
	if got := s.Stats().Accepted; got != 2 {
		t.Errorf("the provider accepted %d OTPs, want 2 (the ones answered 503 must not be sent)", got)
	}
}
