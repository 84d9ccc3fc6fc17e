package gateway

import (
	"net/http"
	"slices"
	"testing"

	"smsgw/internal/config"
)

const testWebhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// callbackProducers gives the notify producer a webhook with one allowed
// callback prefix.
func callbackProducers(cfg *config.Config) {
	cfg.Producers[0].Webhook = config.WebhookConfig{
		URL: "https://notify.example/hook", Secret: testWebhookSecret,
		Allow: []string{"https://notify.example/cb/"},
	}
}

// A callback_url under one of the producer's allow prefixes is stored and
// shown in GET; one under none is a 422 naming the field, on the single,
// batch and OTP endpoints; a malformed one is a 400 naming it.
func TestCallbackURLAllowed(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, callbackProducers)
			ok := "https://notify.example/cb/orders?o=17"
			r := h.post("/v1/messages", keyNotify, msg("transactional", "reference", "order-17", "callback_url", ok))
			wantStatus(t, r, http.StatusAccepted)
			var a acceptedMessage
			r.json(t, &a)
			g := h.get("/v1/messages/"+a.ID, keyNotify)
			wantStatus(t, g, http.StatusOK)
			var v messageView
			g.json(t, &v)
			if v.CallbackURL != ok || v.Reference != "order-17" {
				t.Errorf("GET shows callback_url %q reference %q", v.CallbackURL, v.Reference)
			}
			stored, err := h.app.b.queue.Get(t.Context(), a.ID)
			if err != nil || !stored.Callbacks || stored.CallbackURL != ok {
				t.Errorf("stored %+v, %v: want callbacks on with the url", stored, err)
			}

			for _, bad := range []string{"https://notify.example/other", "https://notify.example.evil.test/cb/"} {
				r = h.post("/v1/messages", keyNotify, msg("transactional", "callback_url", bad))
				wantStatus(t, r, http.StatusUnprocessableEntity)
				if f := r.fields(t); !slices.Equal(f, []string{"callback_url"}) {
					t.Errorf("fields %v, want callback_url", f)
				}
			}
			r = h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{
				msg("transactional", "callback_url", ok), msg("transactional", "callback_url", "https://elsewhere.example/cb/"),
			}})
			wantStatus(t, r, http.StatusOK)
			var br struct{ Accepted, Rejected int }
			r.json(t, &br)
			if br.Accepted != 1 || br.Rejected != 1 {
				t.Errorf("batch accepted %d rejected %d, want 1 and 1", br.Accepted, br.Rejected)
			}
			r = h.post("/v1/messages", keyNotify, msg("transactional", "callback_url", "ftp://notify.example/cb/"))
			wantStatus(t, r, http.StatusBadRequest)
			if f := r.fields(t); !slices.Contains(f, "callback_url") {
				t.Errorf("fields %v, want callback_url", f)
			}
			// login has no webhook at all: any callback_url is refused.
			r = h.post("/v1/otp", keyLogin, map[string]any{"to": "+819012345678", "body": "code 1234", "callback_url": ok})
			wantStatus(t, r, http.StatusUnprocessableEntity)
			if f := r.fields(t); !slices.Equal(f, []string{"callback_url"}) {
				t.Errorf("otp fields %v, want callback_url", f)
			}
			// A message of a producer without a webhook wants no events.
			r = h.post("/v1/messages", keySlow, msg("transactional"))
			wantStatus(t, r, http.StatusAccepted)
			r.json(t, &a)
			if stored, err := h.app.b.queue.Get(t.Context(), a.ID); err != nil || stored.Callbacks {
				t.Errorf("message without a destination: %+v, %v", stored, err)
			}
		})
	}
}
