package gateway

import (
	"net/http"
	"slices"
	"testing"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
)

// callbackPathProducers gives notify two allow prefixes, one ending with a
// slash and one without, and login one for its OTPs.
func callbackPathProducers(cfg *config.Config) {
	cfg.Producers[0].Webhook = config.WebhookConfig{Secret: testWebhookSecret,
		Allow: []string{"http://127.0.0.1:18999/cb/", "https://notify.example/hook", "https://sms.example/"}}
	cfg.Producers[1].Webhook = config.WebhookConfig{Secret: testWebhookSecret,
		Allow: []string{"http://127.0.0.1:18999/otp/"}}
}

// A callback_url is matched against the allow prefixes by scheme, host and
// path segments, not as a string: dot segments (raw, percent-encoded in any
// case, double-encoded, or with a path parameter), encoded slashes and
// backslashes are a 400 naming callback_url, since they could leave the
// prefix on the receiving server; a path that only shares the prefix's
// characters (/cbx under /cb/, /hook-admin under /hook), another port,
// scheme or host (compared in any ASCII case) is a 422. Single, batch and OTP alike.
func TestCallbackURLPathEscapeRefused(t *testing.T) {
	const base = "http://127.0.0.1:18999"
	malformed := []string{
		base + "/cb/../admin/secret",
		base + "/cb/%2e%2e/admin2",
		base + "/cb/%2E%2E/admin2",
		base + "/cb/.%2e/admin2",
		base + "/cb/%2e./admin2",
		base + "/cb/./x",
		base + "/cb/%2e/x",
		base + "/cb/x/..",
		base + "/cb/..;/admin",
		base + "/cb/%252e%252e/admin",
		base + "/cb/a%2fb",
		base + "/cb%2fx",
		base + "/cb/..%2Fadmin",
		base + "/cb/..%5cadmin",
		base + "/cb/..%5Cadmin",
		base + `/cb/..\admin`,
		"http://user:pw@127.0.0.1:18999/cb/x",
	}
	notAllowed := []string{
		base + "/cbx",
		base + "/cb",
		base + "/admin/cb/x",
		"http://127.0.0.1:18998/cb/x",
		"https://127.0.0.1:18999/cb/x",
		"http://127.0.0.1/cb/x",
		"https://notify.example/hookx",
		"https://notify.example/hook-admin",
		"https://notify.example.evil.test/hook",
		"https://notify.example/hoo",
		"https://\u017fms.example/x", // long s: the same as "s" to Unicode case folding, not to DNS
	}
	allowed := []string{
		base + "/cb/",
		base + "/cb/x?token=SECRET&next=../../admin",
		base + "/cb/a/b.json",
		base + "/cb/...",
		base + "/cb/%7Euser/x",
		"HTTP://127.0.0.1:18999/cb/x",
		"https://NOTIFY.example/hook",
		"https://notify.example/hook",
		"https://notify.example/hook/",
		"https://notify.example/hook/orders/17",
		"https://notify.example/hook?o=17",
		"https://sms.example",
		"https://SMS.EXAMPLE/x",
	}
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, callbackPathProducers)
			for _, u := range malformed {
				r := h.post("/v1/messages", keyNotify, msg("transactional", "callback_url", u))
				if r.status != http.StatusBadRequest {
					t.Errorf("%s: status %d, want 400; body %s", u, r.status, r.body)
					continue
				}
				if f := r.fields(t); !slices.Equal(f, []string{"callback_url"}) {
					t.Errorf("%s: fields %v, want [callback_url]", u, f)
				}
			}
			for _, u := range notAllowed {
				r := h.post("/v1/messages", keyNotify, msg("transactional", "callback_url", u))
				if r.status != http.StatusUnprocessableEntity {
					t.Errorf("%s: status %d, want 422; body %s", u, r.status, r.body)
					continue
				}
				if p := r.problem(t); p["type"] != httpapi.ProblemTypeBase+string(httpapi.KindCallbackNotAllowed) {
					t.Errorf("%s: problem %v, want %s", u, p, httpapi.KindCallbackNotAllowed)
				}
			}
			for _, u := range allowed {
				r := h.post("/v1/messages", keyNotify, msg("transactional", "callback_url", u))
				if r.status != http.StatusAccepted {
					t.Errorf("%s: status %d, want 202; body %s", u, r.status, r.body)
				}
			}

			// A batch refuses the item, naming it, and keeps the others.
			r := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{
				msg("transactional", "callback_url", base+"/cb/ok"),
				msg("transactional", "callback_url", base+"/cb/%2e%2e/admin2"),
				msg("transactional", "callback_url", base+"/cbx"),
			}})
			wantStatus(t, r, http.StatusOK)
			var br struct{ Accepted, Rejected int }
			r.json(t, &br)
			if br.Accepted != 1 || br.Rejected != 2 {
				t.Errorf("batch accepted %d rejected %d, want 1 and 2: %s", br.Accepted, br.Rejected, r.body)
			}

			// The OTP endpoint applies the same rule.
			otp := func(u string) reply {
				return h.post("/v1/otp", keyLogin, map[string]any{"to": "+819012345678", "body": "code 1234", "callback_url": u})
			}
			wantProblem(t, otp(base+"/otp/../admin"), http.StatusBadRequest, httpapi.KindInvalid, "callback_url")
			wantProblem(t, otp(base+"/otpx"), http.StatusUnprocessableEntity, httpapi.KindCallbackNotAllowed, "callback_url")
			wantStatus(t, otp(base+"/otp/x"), http.StatusOK)
		})
	}
}
