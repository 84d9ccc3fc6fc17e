package gateway

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
)

// TestAdmissionConformance runs the same admission cases against both
// executors of admission.Order: in process (embedded store) and the
// enqueue script (Redis). Each case names the answer.
func TestAdmissionConformance(t *testing.T) {
	const (
		listed = "+819012345677" // on the suppression list
		other  = "+819012345676"
	)
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			clock := newTestClock(time.Now()) // frozen: the backlog estimate is read once
			h := startClock(t, m, func(c *config.Config) {
				for i := range c.Producers {
					switch c.Producers[i].Name {
					case "slow":
						c.Producers[i].Rate = 0.01 // burst 2, then one unit every 100 s
					case "login":
						c.Producers[i].Rate, c.Producers[i].Burst = 0.01, 1
					}
				}
			}, clock.now)
			problemType := func(r reply) string {
				t.Helper()
				p, _ := r.problem(t)["type"].(string)
				return p
			}
			wantProblem := func(what string, r reply, status int, kind string) {
				t.Helper()
				if r.status != status || problemType(r) != httpapi.ProblemTypeBase+kind {
					t.Fatalf("%s: status %d problem %s; want %d %s", what, r.status, r.body, status, kind)
				}
			}

			past := clock.now().Add(-time.Hour).UTC().Format(time.RFC3339)
			r := h.post("/v1/messages", keyNotify, msg("transactional", "send_at", past))
			wantProblem("schedule", r, http.StatusBadRequest, "invalid")
			if !slices.Contains(r.fields(t), "send_at") {
				t.Errorf("schedule: fields %v, want send_at", r.fields(t))
			}

			first := h.post("/v1/messages", keyNotify, msg("transactional"), "Idempotency-Key", "conf-1")
			wantStatus(t, first, http.StatusAccepted)
			again := h.post("/v1/messages", keyNotify, msg("transactional"), "Idempotency-Key", "conf-1")
			wantStatus(t, again, http.StatusAccepted)
			if again.header.Get("Idempotent-Replayed") != "true" || accepted(t, again).ID != accepted(t, first).ID {
				t.Errorf("replay: %v %s; want the first answer (%s)", again.header, again.body, first.body)
			}
			wantProblem("key reused", h.post("/v1/messages", keyNotify, msg("marketing"), "Idempotency-Key", "conf-1"),
				http.StatusUnprocessableEntity, "idempotency-key-reused")

			// A queued message to a listed number is accepted like any
			// other (its take ends it): the answer tells nothing of the list.
			wantStatus(t, h.post("/v1/admin/suppressions", keyAdmin, map[string]any{"to": listed}), http.StatusCreated)
			wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional", "to", listed)), http.StatusAccepted)

			for range 2 {
				wantStatus(t, h.post("/v1/messages", keySlow, msg("transactional")), http.StatusAccepted)
			}
			r = h.post("/v1/messages", keySlow, msg("transactional"))
			wantProblem("ingress quota", r, http.StatusTooManyRequests, "rate-limited")
			if r.header.Get("RateLimit-Limit") != "2" || r.header.Get("RateLimit-Remaining") != "0" || r.header.Get("Retry-After") == "" {
				t.Errorf("ingress quota: headers %v", r.header)
			}

			// An OTP's deadline counts from its arrival on the gateway's
			// clock: bring the frozen clock to now first.
			clock.add(time.Since(clock.now()))
			otp := map[string]any{"to": other, "body": "123456", "deadline_ms": 5000}
			wantStatus(t, h.post("/v1/otp", keyLogin, otp), http.StatusOK)
			wantProblem("otp quota", h.post("/v1/otp", keyLogin, otp), http.StatusTooManyRequests, "rate-limited")

			// Paused, nothing leaves the queue: max_outstanding holds.
			wantStatus(t, h.post("/v1/admin/pause", keyAdmin, map[string]any{"reason": "conformance"}), http.StatusOK)
			b := h.post("/v1/messages/batch", keyCapped, batchOf(3, func(int) map[string]any { return msg("transactional") }))
			wantStatus(t, b, http.StatusOK)
			var br struct {
				Accepted, Rejected int
				Results            []struct {
					Status int
					Error  *struct{ Type string }
				}
			}
			b.json(t, &br)
			if br.Accepted != 2 || br.Rejected != 1 || len(br.Results) != 3 || br.Results[2].Status != http.StatusTooManyRequests ||
				br.Results[2].Error == nil || br.Results[2].Error.Type != httpapi.ProblemTypeBase+"too-many-outstanding" {
				t.Fatalf("batch partial accept: %s", b.body)
			}
			wantProblem("outstanding", h.post("/v1/messages", keyCapped, msg("transactional")),
				http.StatusTooManyRequests, "too-many-outstanding")

			// A backlog the frozen clock never drains: a 1 s TTL lapses
			// before its turn, whatever the number.
			wantStatus(t, h.post("/v1/messages/batch", keyNotify, batchOf(httpapi.MaxBatch, func(int) map[string]any { return msg("marketing") })),
				http.StatusOK)
			wantProblem("ttl", h.post("/v1/messages", keyNotify, msg("marketing", "ttl_seconds", 1)),
				http.StatusTooManyRequests, "would-expire-before-send")
			wantProblem("ttl, listed number", h.post("/v1/messages", keyNotify, msg("marketing", "ttl_seconds", 1, "to", listed)),
				http.StatusTooManyRequests, "would-expire-before-send")
		})
	}
}
