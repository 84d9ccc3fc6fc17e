package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
)

// TestKeyedRequestsBounded, in both modes, through real HTTP: what a
// producer can make the gateway keep for the idempotency window is
// bounded by producers[].max_keyed_per_day. Within it, keyed requests
// (single and batch) are accepted; past it a keyed request with a new key
// is 429 too-many-keyed-requests naming the key and the header, with
// Retry-After; a retry of a key already answered
// still gets its first answer, byte for byte, and a request without a key
// is accepted. Another producer has its own bound.
func TestKeyedRequestsBounded(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, func(c *config.Config) { c.Producers[0].MaxKeyedPerDay = 3 })
			keyed := func(key string) reply {
				return h.post("/v1/messages", keyNotify, msg("transactional"), "Idempotency-Key", key)
			}
			first := keyed("order-1")
			wantStatus(t, first, http.StatusAccepted)
			wantStatus(t, keyed("order-2"), http.StatusAccepted)
			b := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{msg("transactional")}}, "Idempotency-Key", "batch-1")
			wantStatus(t, b, http.StatusOK)

			over := keyed("order-3")
			p := wantProblem(t, over, http.StatusTooManyRequests, httpapi.ProblemKind("too-many-keyed-requests"), "Idempotency-Key")
			if d, _ := p["detail"].(string); !strings.Contains(d, "producers[].max_keyed_per_day") {
				t.Errorf("detail %q does not name the key", d)
			}
			if ra, err := strconv.Atoi(over.header.Get("Retry-After")); err != nil || ra < 1 {
				t.Errorf("Retry-After %q", over.header.Get("Retry-After"))
			}
			again := keyed("order-1")
			wantStatus(t, again, http.StatusAccepted)
			if string(again.body) != string(first.body) || again.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("retry of an answered key: %s (replayed %q), first %s", again.body, again.header.Get("Idempotent-Replayed"), first.body)
			}
			wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
			wantStatus(t, h.post("/v1/messages", keyLogin, msg("otp"), "Idempotency-Key", "order-3"), http.StatusAccepted)
		})
	}
}
