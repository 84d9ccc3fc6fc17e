package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"smsgw/internal/config"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
	"smsgw/internal/webhook"
)

// callbacks is the delivery of status callbacks: the outbox of the
// backend's queue and this replica's deliverer (a loop of the App).
type callbacks struct {
	outbox queue.Outbox
	d      *webhook.Deliverer
}

func (c *callbacks) Start(ctx context.Context) { c.d.Start(ctx) }
func (c *callbacks) Stop()                     { c.d.Stop() }

// newCallbacks builds the deliverer over b's outbox. Every replica runs one,
// whether or not a producer has a webhook now: events already written must
// still go (or die) after a configuration change.
func newCallbacks(cfg config.Config, d deps, b *backend, owner string) (*callbacks, error) {
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
	allowed := map[string][]callbackPrefix{} // each producer's webhook.allow, as the API checks it
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
		dests[p.Name] = webhook.Destination{URL: p.Webhook.URL, Key: key, PreviousKey: prev}
		allowed[p.Name] = parseCallbackPrefixes(p.Webhook.Allow)
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
				if !callbackUnder(allowed[e.Producer], e.CallbackURL) {
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
	return &callbacks{outbox: ob, d: dl}, nil
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

// adminEvent is a dead callback as the admin API shows it: the event and
// whether it went to the message's own callback_url (never that URL: it
// may carry a token), no secret.
type adminEvent struct {
	ID                string     `json:"id"`
	Type              string     `json:"type"`
	MessageID         string     `json:"message_id"`
	Producer          string     `json:"producer"`
	Reference         string     `json:"reference,omitempty"`
	Status            sms.Status `json:"status"`
	Class             sms.Class  `json:"class"`
	At                time.Time  `json:"at"`
	Attempts          int        `json:"attempts"`
	LastError         string     `json:"last_error,omitempty"`
	DeadAt            time.Time  `json:"dead_at"`
	PerMessageURL     bool       `json:"per_message_url"`
	ProviderMessageID string     `json:"provider_message_id,omitempty"`
}

type deadCallbacksResponse struct {
	Events []adminEvent `json:"events"`
}

// adminDeadCallbacks lists dead callbacks, oldest death first.
func (s *server) adminDeadCallbacks(w http.ResponseWriter, r *http.Request) {
	limit, perr := listLimit(r)
	if perr != nil {
		s.writeError(w, r, perr)
		return
	}
	evs, err := s.callbacks.outbox.DeadEvents(r.Context(), limit)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("dead callbacks: %w", err))
		return
	}
	out := deadCallbacksResponse{Events: make([]adminEvent, 0, len(evs))}
	for _, e := range evs {
		out.Events = append(out.Events, adminEvent{ID: e.ID, Type: "message." + string(e.Status), MessageID: e.MessageID,
			Producer: e.Producer, Reference: e.Reference, Status: e.Status, Class: e.Class, At: e.At.UTC(),
			Attempts: e.Attempts, LastError: e.LastError, DeadAt: e.DeadAt.UTC(), PerMessageURL: e.CallbackURL != "",
			ProviderMessageID: e.ProviderID})
	}
	writeJSON(w, s.log, "application/json", http.StatusOK, out)
}

type retriedCallback struct {
	ID string `json:"id"`
}

// adminRetryCallback makes a dead callback due again now.
func (s *server) adminRetryCallback(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if len(id) > 64 {
		s.writeError(w, r, errorf(kindNotFound, "no such dead callback"))
		return
	}
	if err := s.callbacks.outbox.RetryDeadEvent(r.Context(), id); err != nil {
		if errors.Is(err, queue.ErrNotFound) {
			s.writeError(w, r, errorf(kindNotFound, "no such dead callback"))
			return
		}
		s.writeError(w, r, fmt.Errorf("retry dead callback: %w", err))
		return
	}
	s.callbacks.d.Wake()
	writeJSON(w, s.log, "application/json", http.StatusAccepted, retriedCallback{ID: id})
}
