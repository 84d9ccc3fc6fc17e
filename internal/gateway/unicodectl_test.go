package gateway

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"smsgw/internal/config"
)

// TestUnicodeControlsRefused: a body with a
// bidirectional or zero-width character is a 400 naming body and the
// character's code point, unless the producer allows them.
func TestUnicodeControlsRefused(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) {
		c.Producers[0].AllowUnicodeControls = true // notify
	})
	for _, tc := range []struct{ name, body, point string }{
		{"right-to-left override", "Pay to \u202eKCAB\u202c now", "U+202E"},
		{"zero-width space", "Your code is 12\u200b34", "U+200B"},
		{"byte order mark", "\ufeffhello", "U+FEFF"},
		{"isolate", "a \u2067b\u2069 c", "U+2067"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := h.with(t)
			for _, r := range []reply{
				h.post("/v1/messages", keySlow, msg("transactional", "body", tc.body)),
				h.post("/v1/otp", keyLogin, otpBody("body", tc.body)),
			} {
				wantStatus(t, r, http.StatusBadRequest)
				if f := r.fields(t); !slices.Contains(f, "body") || !strings.Contains(string(r.body), tc.point) {
					t.Errorf("errors %v, body %s; want body named with %s", f, r.body, tc.point)
				}
			}
			wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional", "body", tc.body)), http.StatusAccepted)
		})
	}
	wantStatus(t, h.post("/v1/messages", keySlow, msg("transactional", "body", "Grüße, 你好 👋")), http.StatusAccepted)
}
