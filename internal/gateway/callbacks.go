package gateway

import (
	"fmt"
	"net/http"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/queue"
	"smsgw/internal/webhook"
)

// newCallbacks builds the deliverer over b's outbox. Every replica runs one,
// whether or not a producer has a webhook now: events already written must
// still go (or die) after a configuration change.
func newCallbacks(cfg config.Config, d deps, b *backend, owner string) (*httpapi.Callbacks, error) {
	ob, ok := b.queue.(queue.Outbox)
	if !ok {
		return nil, fmt.Errorf("gateway: the %s queue has no outbox", b.mode)
	}
	w := cfg.Webhooks
	allow, err := webhook.ParseNetworks(w.AllowNetworks)
	if err != nil {
		return nil, fmt.Errorf("gateway: webhooks.allow_networks: %w", err)
	}
	dests := map[string]webhook.Destination{}
	allowed := map[string][]httpapi.CallbackPrefix{} // each producer's webhook.allow, as the API checks it
	for i, p := range cfg.Producers {
		if p.Webhook.Secret == "" {
			continue
		}
		key, err := config.ParseWebhookSecret(p.Webhook.Secret)
		if err != nil {
			return nil, fmt.Errorf("gateway: producers[%d].webhook.secret: %w", i, err)
		}
		var prev []byte // webhook.previous_secret: a second signature while rotating
		if p.Webhook.PreviousSecret != "" {
			if prev, err = config.ParseWebhookSecret(p.Webhook.PreviousSecret); err != nil {
				return nil, fmt.Errorf("gateway: producers[%d].webhook.previous_secret: %w", i, err)
			}
		}
		var client *http.Client // producers[].webhook.allow_networks, in place of the global list
		if len(p.Webhook.AllowNetworks) > 0 {
			own, err := webhook.ParseNetworks(p.Webhook.AllowNetworks)
			if err != nil {
				return nil, fmt.Errorf("gateway: producers[%d].webhook.allow_networks: %w", i, err)
			}
			client = webhook.NewClient(w.Timeout, own)
		}
		dests[p.Name] = webhook.Destination{URL: p.Webhook.URL, Key: key, PreviousKey: prev, Client: client}
		allowed[p.Name] = httpapi.ParseCallbackPrefixes(p.Webhook.Allow)
	}
	m, err := webhook.NewMetrics(d.reg)
	if err != nil {
		return nil, fmt.Errorf("gateway: callback metrics: %w", err)
	}
	if err := d.reg.Register(webhook.NewBacklogCollector(ob, d.log)); err != nil {
		return nil, fmt.Errorf("gateway: callback metrics: %w", err)
	}
	dl, err := webhook.New(webhook.Config{
		Outbox: ob, Client: webhook.NewClient(w.Timeout, allow), Owner: owner, Logger: d.log, Metrics: m,
		Resolve: func(e *queue.Event) (webhook.Destination, bool) {
			dst, ok := dests[e.Producer]
			if !ok {
				return webhook.Destination{}, false
			}
			if e.CallbackURL != "" {
				// checked again as the API would now: the configuration
				// may have narrowed webhook.allow since the message was
				// accepted, or an earlier release accepted a path that
				// climbs out of its prefix
				if !httpapi.CallbackUnder(allowed[e.Producer], e.CallbackURL) {
					return webhook.Destination{}, false
				}
				dst.URL = e.CallbackURL
			}
			return dst, dst.URL != ""
		},
		Workers: w.Workers, PerEndpoint: w.Concurrency, Timeout: w.Timeout, MaxAge: w.MaxAge,
		BackoffBase: w.BackoffBase, BackoffMax: w.BackoffMax,
		BreakerFailures: w.BreakerFailures, BreakerOpen: w.BreakerOpen,
		IdleMax: idleMax(dests),
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: callbacks: %w", err)
	}
	return &httpapi.Callbacks{Outbox: ob, D: dl}, nil
}

// idleMax is how long the deliverer of an idle replica waits between looks
// at the outbox: the default while a producer has a webhook; with none,
// nothing new can be written, and only what an earlier configuration left
// is drained (or dies), so a look every 30 s.
func idleMax(dests map[string]webhook.Destination) time.Duration {
	if len(dests) == 0 {
		return 30 * time.Second
	}
	return webhook.DefaultIdleMax
}
