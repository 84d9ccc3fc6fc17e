package gateway

import (
	"net/http"
	"strings"
	"testing"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/provider/sim"
)

// The admin API shows a message's callback_url as its scheme and host
// only, in GET /v1/admin/messages/{id} and in the dead letters: its path
// and query may carry the producer's token. The producer's own GET shows
// it whole.
func TestAdminViewHidesCallbackURL(t *testing.T) {
	const (
		secret = "SECRET-TOKEN-42"
		cb     = "https://notify.example/cb/orders/17?token=" + secret
		origin = "https://notify.example"
	)
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, func(cfg *config.Config) {
				callbackProducers(cfg)
				cfg.Dispatch.MaxAttempts = 1
			})
			// Every send fails for now: with max_attempts 1 the message is a
			// dead letter.
			fail := 1.0
			if err := h.sim.Apply(sim.Control{FailRate: &fail}); err != nil {
				t.Fatal(err)
			}
			a := accepted(t, h.post("/v1/messages", keyNotify, msg("transactional", "callback_url", cb)))

			own := h.get("/v1/messages/"+a.ID, keyNotify)
			wantStatus(t, own, http.StatusOK)
			var v httpapi.MessageView
			own.json(t, &v)
			if v.CallbackURL != cb {
				t.Errorf("producer's GET shows callback_url %q, want %q", v.CallbackURL, cb)
			}

			adm := h.get("/v1/admin/messages/"+a.ID, keyAdmin)
			wantStatus(t, adm, http.StatusOK)
			var am httpapi.AdminMessage
			adm.json(t, &am)
			if am.CallbackURL != origin || am.Producer != "notify" {
				t.Errorf("admin GET shows callback_url %q producer %q, want %q and notify", am.CallbackURL, am.Producer, origin)
			}
			if s := string(adm.body); strings.Contains(s, secret) || strings.Contains(s, "/cb/orders") {
				t.Errorf("admin GET shows the callback path or token: %s", s)
			}

			var dl httpapi.DeadLettersResponse
			var body string
			eventually(t, "the dead letter", func() bool {
				r := h.get("/v1/admin/dead-letters", keyAdmin)
				wantStatus(t, r, http.StatusOK)
				r.json(t, &dl)
				body = string(r.body)
				return len(dl.Messages) == 1
			})
			if d := dl.Messages[0]; d.ID != a.ID || d.CallbackURL != origin {
				t.Errorf("dead letter %s shows callback_url %q, want %s with %q", d.ID, d.CallbackURL, a.ID, origin)
			}
			if strings.Contains(body, secret) || strings.Contains(body, "/cb/orders") {
				t.Errorf("dead letters show the callback path or token: %s", body)
			}
		})
	}
}
