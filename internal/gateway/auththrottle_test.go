package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// TestAuthFailuresThrottled (issue 8, finding 10): failed authentications
// from one client address are throttled (429 with Retry-After once its
// budget is spent) and their WARN lines sampled, while a valid key from the
// same address still works.
func TestAuthFailuresThrottled(t *testing.T) {
	h := start(t, embeddedMode, nil)
	counts := map[int]int{}
	for i := range 40 {
		path, key := "/v1/messages", "wrong-key-0123456789"
		if i%2 == 1 {
			path = "/v1/admin/stats"
		}
		var r reply
		if path == "/v1/messages" {
			r = h.post(path, key, msg("transactional"))
		} else {
			r = h.get(path, key)
		}
		counts[r.status]++
		if r.status == http.StatusTooManyRequests && r.header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
	if counts[http.StatusTooManyRequests] == 0 || counts[http.StatusUnauthorized] > authFailBurst {
		t.Errorf("40 failed authentications: %v; want at most %d 401s, then 429s", counts, authFailBurst)
	}
	if n := strings.Count(h.logs.String(), `"unknown `); n > 3 {
		t.Errorf("%d WARN lines for 40 failures; want them sampled", n)
	}
	wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
	wantStatus(t, h.get("/v1/admin/stats", keyAdmin), http.StatusOK)
}
