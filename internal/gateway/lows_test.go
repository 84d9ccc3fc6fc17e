package gateway

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/redistest"
)

// TestReferenceRefusesInvisibleCharacters: a reference with a
// bidirectional or zero-width character is refused as a body with one is
// (the same check), on every route that takes one, and whatever the
// producer's allow_unicode_controls.
func TestReferenceRefusesInvisibleCharacters(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) {
		c.Producers[0].AllowUnicodeControls = true // notify
	})
	for _, tc := range []struct{ name, ref, point string }{
		{"right-to-left override", "order-\u202e4321", "U+202E"},
		{"zero-width space", "order\u200b1234", "U+200B"},
		{"isolate", "a\u2067b\u2069", "U+2067"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := h.with(t)
			for _, r := range []struct {
				reply
				field string
			}{
				{h.post("/v1/messages", keyNotify, msg("transactional", "reference", tc.ref)), "reference"},
				{h.post("/v1/otp", keyLogin, otpBody("reference", tc.ref)), "reference"},
			} {
				wantStatus(t, r.reply, http.StatusBadRequest)
				if f := r.fields(t); !slices.Contains(f, r.field) || !strings.Contains(string(r.body), tc.point) {
					t.Errorf("fields %v, body %s; want %s named with %s", f, r.body, r.field, tc.point)
				}
			}
			b := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{msg("transactional", "reference", tc.ref)}})
			wantStatus(t, b, http.StatusOK)
			var out httpapi.BatchResponse
			b.json(t, &out)
			if out.Rejected != 1 || !strings.Contains(string(b.body), "messages[0].reference") {
				t.Errorf("batch: %s; want the item refused naming messages[0].reference", b.body)
			}
		})
	}
	wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional", "reference", "Bestellung-ä-你好")), http.StatusAccepted)
}

// TestUnauthenticatedProbesSampledInLogs: with Redis down, /readyz and
// /metrics (no key) write one WARN line each per 10 s with a count, not
// one per request.
func TestUnauthenticatedProbesSampledInLogs(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	h := start(t, redisMode, func(c *config.Config) { c.Redis.Addr = srv.Addr })
	srv.Kill()
	const n = 20
	began := time.Now()
	for range n {
		wantStatus(t, h.get("/readyz", ""), http.StatusServiceUnavailable)
		if r := h.get("/metrics", ""); r.status != http.StatusOK {
			t.Fatalf("/metrics: %d", r.status)
		}
	}
	lines := map[string]int{}
	for l := range strings.SplitSeq(h.logs.String(), "\n") {
		if !strings.Contains(l, `"level":"WARN"`) {
			continue
		}
		for _, m := range []string{"readiness checks failed", "metrics: queue stats", "metrics: outbox stats"} {
			if strings.Contains(l, m) {
				lines[m]++
			}
		}
	}
	if lines["readiness checks failed"] == 0 || lines["metrics: queue stats"] == 0 {
		t.Fatalf("WARN lines %v; want the failures logged", lines)
	}
	most := 2 + int(time.Since(began)/(10*time.Second)) // one per 10 s begun
	for m, c := range lines {
		if c > most || c >= n {
			t.Errorf("%d WARN lines %q for %d requests in %s; want at most %d", c, m, n, time.Since(began), most)
		}
	}
}
