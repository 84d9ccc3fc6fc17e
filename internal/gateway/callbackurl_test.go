package gateway

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/webhook"
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
			var a httpapi.AcceptedMessage
			r.json(t, &a)
			g := h.get("/v1/messages/"+a.ID, keyNotify)
			wantStatus(t, g, http.StatusOK)
			var v httpapi.MessageView
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

// hookReceiver is a producer's webhook endpoint on the loopback address.
type hookReceiver struct {
	mu     sync.Mutex
	bodies map[string][]string // webhook-id -> bodies
	bad    int
	fail   bool
	srv    *httptest.Server
}

func newHookReceiver(t *testing.T) *hookReceiver {
	key, err := config.ParseWebhookSecret(testWebhookSecret)
	if err != nil {
		t.Fatal(err)
	}
	r := &hookReceiver{bodies: map[string][]string{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		id := req.Header.Get(webhook.HeaderID)
		err := webhook.Verify(key, id, req.Header.Get(webhook.HeaderTimestamp), req.Header.Get(webhook.HeaderSignature), body, time.Now(), 5*time.Minute)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil {
			r.bad++
		}
		r.bodies[id] = append(r.bodies[id], string(body))
		if r.fail {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *hookReceiver) events() map[string][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.bodies)
}

// A sent message and an OTP produce one signed event each at the producer's
// webhook (the OTP's at its own callback_url), bodies valid against the
// spec's StatusEvent, without the number or the text. A receiver on the
// loopback address is reached only because allow_networks lists it.
func TestCallbacksDelivered(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			hook, own := newHookReceiver(t), newHookReceiver(t)
			h := start(t, m, func(cfg *config.Config) {
				cfg.Producers[0].Webhook = config.WebhookConfig{URL: hook.srv.URL + "/hook", Secret: testWebhookSecret}
				cfg.Producers[1].Webhook = config.WebhookConfig{Secret: testWebhookSecret, Allow: []string{own.srv.URL + "/otp/"}}
				cfg.Webhooks.AllowNetworks = []string{"127.0.0.0/8"}
			})
			r := h.post("/v1/messages", keyNotify, msg("transactional", "reference", "order-9"))
			wantStatus(t, r, http.StatusAccepted)
			var a httpapi.AcceptedMessage
			r.json(t, &a)
			o := h.post("/v1/otp", keyLogin, map[string]any{"to": "+819012345678", "body": "code 4711", "reference": "login-3",
				"callback_url": own.srv.URL + "/otp/x"})
			wantStatus(t, o, http.StatusOK)
			var sent httpapi.OTPSent
			o.json(t, &sent)
			eventually(t, "both events", func() bool { return len(hook.events()) == 1 && len(own.events()) == 1 })

			doc, err := specDoc()
			if err != nil {
				t.Fatal(err)
			}
			schema := doc.Components.Schemas["StatusEvent"].Value
			for want, rc := range map[string]*hookReceiver{a.ID: hook, sent.ID: own} {
				for id, bodies := range rc.events() {
					var ev map[string]any
					if err := json.Unmarshal([]byte(bodies[0]), &ev); err != nil {
						t.Fatal(err)
					}
					if err := schema.VisitJSON(ev); err != nil {
						t.Errorf("event %s does not match StatusEvent: %v\n%s", id, err, bodies[0])
					}
					data := ev["data"].(map[string]any)
					if ev["type"] != "message.sent" || data["id"] != want || data["provider_message_id"] == "" {
						t.Errorf("event %s: %s", id, bodies[0])
					}
					if strings.Contains(bodies[0], "9012345678") || strings.Contains(bodies[0], "code 4711") {
						t.Errorf("event %s carries the number or the text: %s", id, bodies[0])
					}
				}
				if rc.bad != 0 {
					t.Errorf("%d deliveries with a bad signature", rc.bad)
				}
			}
			var st struct {
				Callbacks *struct{ Backlog, Dead int64 } `json:"callbacks"` // absent: not read
			}
			eventually(t, "an empty outbox in the stats", func() bool {
				s := h.get("/v1/admin/stats", keyAdmin)
				wantStatus(t, s, http.StatusOK)
				s.json(t, &st)
				return st.Callbacks != nil && st.Callbacks.Backlog == 0
			})
		})
	}
}

// Without allow_networks the loopback receiver is never reached: the
// attempt is refused at connect time and counted; the admin list of dead
// callbacks and its retry answer as the spec says.
func TestCallbacksToPrivateAddressesRefused(t *testing.T) {
	hook := newHookReceiver(t)
	h := start(t, embeddedMode, func(cfg *config.Config) {
		cfg.Producers[0].Webhook = config.WebhookConfig{URL: hook.srv.URL + "/hook", Secret: testWebhookSecret}
	})
	wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
	eventually(t, "a refused attempt in /metrics", func() bool {
		r := h.get("/metrics", "")
		return strings.Contains(string(r.body), `smsgw_callbacks_attempts_total{outcome="refused"} 1`) ||
			strings.Contains(string(r.body), `smsgw_callbacks_attempts_total{outcome="refused"} 2`)
	})
	if n := len(hook.events()); n != 0 {
		t.Fatalf("the loopback receiver got %d events", n)
	}
	r := h.get("/v1/admin/callbacks/dead", keyAdmin)
	wantStatus(t, r, http.StatusOK)
	wantStatus(t, h.post("/v1/admin/callbacks/dead/evt_nope_1/retry", keyAdmin, nil), http.StatusNotFound)
	wantStatus(t, h.get("/v1/admin/callbacks/dead?limit=0", keyAdmin), http.StatusBadRequest)
}

// TestCallbackSecretRotation: while a producer's webhook.previous_secret
// is set, its endpoint still verifying with that (old) secret accepts
// every delivery, signed with the new secret too.
func TestCallbackSecretRotation(t *testing.T) {
	const newSecret = "whsec_ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="
	hook := newHookReceiver(t) // verifies with testWebhookSecret, the old one
	h := start(t, embeddedMode, func(cfg *config.Config) {
		cfg.Producers[0].Webhook = config.WebhookConfig{URL: hook.srv.URL + "/hook", Secret: newSecret, PreviousSecret: testWebhookSecret}
		cfg.Webhooks.AllowNetworks = []string{"127.0.0.0/8"}
	})
	wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
	eventually(t, "the event", func() bool { return len(hook.events()) == 1 })
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if hook.bad != 0 {
		t.Errorf("%d deliveries the endpoint holding the previous secret could not verify", hook.bad)
	}
}

// A producer's own webhook.allow_networks replaces webhooks.allow_networks
// for its callbacks alone: listed there, its loopback receiver is reached
// while another producer's is refused; listed globally, a producer whose
// own list leaves loopback out is refused while the other falls back to
// the global list and is reached.
func TestCallbackNetworksPerProducer(t *testing.T) {
	for _, tc := range []struct {
		name          string
		global, own   []string
		notifyReached bool
	}{
		{"own list only", nil, []string{"127.0.0.0/8"}, true},
		{"global list, own narrower", []string{"127.0.0.0/8"}, []string{"10.0.0.0/8"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hook, own := newHookReceiver(t), newHookReceiver(t)
			h := start(t, embeddedMode, func(cfg *config.Config) {
				cfg.Producers[0].Webhook = config.WebhookConfig{URL: hook.srv.URL + "/hook", Secret: testWebhookSecret, AllowNetworks: tc.own}
				cfg.Producers[1].Webhook = config.WebhookConfig{Secret: testWebhookSecret, Allow: []string{own.srv.URL + "/otp/"}}
				cfg.Webhooks.AllowNetworks = tc.global
			})
			wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
			wantStatus(t, h.post("/v1/otp", keyLogin, map[string]any{"to": "+819012345678", "body": "code 4711",
				"callback_url": own.srv.URL + "/otp/x"}), http.StatusOK)
			reached, refused := own, hook
			if tc.notifyReached {
				reached, refused = hook, own
			}
			eventually(t, "one event delivered and one refused", func() bool {
				r := h.get("/metrics", "")
				return len(reached.events()) == 1 && strings.Contains(string(r.body), `smsgw_callbacks_attempts_total{outcome="refused"}`) &&
					!strings.Contains(string(r.body), `smsgw_callbacks_attempts_total{outcome="refused"} 0`)
			})
			if n := len(refused.events()); n != 0 {
				t.Fatalf("the receiver outside its producer's networks got %d events", n)
			}
		})
	}
}
