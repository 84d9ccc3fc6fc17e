package gateway

import (
	"fmt"

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/provider"
	"smsgw/internal/queue"
)

// newReplies is the routing of recipients' replies over b's queue, to the
// producers with a webhook url; nil when the queue keeps no routes.
func newReplies(cfg config.Config, d deps, b *backend, protect *admission.Protector, prov provider.Provider) (*admission.Replies, error) {
	routes, ok := b.queue.(queue.Routes)
	if !ok {
		return nil, nil
	}
	var hooks []string
	for _, p := range cfg.Producers {
		if p.Webhook.URL != "" && p.Webhook.Secret != "" {
			hooks = append(hooks, p.Name)
		}
	}
	sender := ""
	if ds, ok := prov.(provider.DefaultSender); ok {
		sender = ds.DefaultSender()
	}
	r, err := admission.NewReplies(routes, protect, hooks, sender, d.reg, d.log, d.now)
	if err != nil {
		return nil, fmt.Errorf("gateway: reply metrics: %w", err)
	}
	return r, nil
}
