package gateway

import (
	"net/http"
	"strings"
	"testing"

	"smsgw/internal/config"
)

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
