package gateway

import (
	"context"
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
	"smsgw/internal/provider/sim"
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
	eachMode(t, func(t *testing.T, m mode) {
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
	eachMode(t, func(t *testing.T, m mode) {
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
	eachMode(t, func(t *testing.T, m mode) {
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

// TestCallbackURLCheckedAtDelivery: a message's callback_url is checked
// again before each delivery attempt, as the API would check it now. Its
// events are not sent (retried until max_age, then dead: "no destination
// configured or allowed") when the producer's webhook.allow no longer
// covers it: the configuration was
// narrowed after the message was accepted, or an earlier release accepted
// a path that climbs out of its prefix.
func TestCallbackURLCheckedAtDelivery(t *testing.T) {
	own := newHookReceiver(t)
	own.mu.Lock()
	own.fail = true // the first replica's attempts fail: the event stays pending
	own.mu.Unlock()
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, embeddedMode, s.URL())
	cfg.Producers[0].Webhook = config.WebhookConfig{Secret: testWebhookSecret, Allow: []string{own.srv.URL + "/cb/"}}
	cfg.Webhooks.AllowNetworks = []string{"127.0.0.0/8"}
	cfg.Webhooks.BackoffBase, cfg.Webhooks.BackoffMax = 20*time.Millisecond, 50*time.Millisecond
	first := startWith(t, cfg, s)
	wantStatus(t, first.post("/v1/messages", keyNotify, msg("transactional", "callback_url", own.srv.URL+"/cb/x?token=t1")),
		http.StatusAccepted)
	eventually(t, "a failed attempt", func() bool { return len(own.events()) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.app.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	attempts := 0
	for _, bodies := range own.events() {
		attempts += len(bodies)
	}
	own.mu.Lock()
	own.fail = false
	own.mu.Unlock()

	// the same store, the prefix narrowed to another path; the event is
	// retried (another replica of a rolling change might have the
	// prefix) until max_age, which it is past already
	cfg.Producers[0].Webhook.Allow = []string{own.srv.URL + "/other/"}
	cfg.Webhooks.MaxAge = time.Millisecond
	second := startWith(t, cfg, s)
	var dead struct {
		Events []struct {
			LastError string `json:"last_error"`
		} `json:"events"`
	}
	eventually(t, "the event dead", func() bool {
		r := second.get("/v1/admin/callbacks/dead", keyAdmin)
		wantStatus(t, r, http.StatusOK)
		r.json(t, &dead)
		return len(dead.Events) == 1
	})
	if !strings.Contains(dead.Events[0].LastError, "allowed") {
		t.Errorf("dead event's last error %q, want it to say the destination is not allowed", dead.Events[0].LastError)
	}
	n := 0
	for _, bodies := range own.events() {
		n += len(bodies)
	}
	if n != attempts {
		t.Errorf("the receiver got %d attempts after the prefix was narrowed (%d before)", n-attempts, attempts)
	}
}

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
	eachMode(t, func(t *testing.T, m mode) {
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
