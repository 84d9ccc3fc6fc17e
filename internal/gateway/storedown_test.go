package gateway

import (
	"net/http"
	"strings"
	"testing"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

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
