package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

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
