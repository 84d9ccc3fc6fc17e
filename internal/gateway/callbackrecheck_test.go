package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/provider/sim"
)

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
