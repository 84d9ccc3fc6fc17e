package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
	"smsgw/internal/webhook"
)

// Callbacks is the delivery of status callbacks: the outbox of the
// backend's queue and this replica's deliverer (a loop of the App).
type Callbacks struct {
	Outbox queue.Outbox
	D      *webhook.Deliverer
}

// Start runs the deliverer until Stop or until ctx ends.
func (c *Callbacks) Start(ctx context.Context) { c.D.Start(ctx) }

// Stop ends the deliverer and waits for it.
func (c *Callbacks) Stop() { c.D.Stop() }

// Wake has the deliverer look for due events now.
func (c *Callbacks) Wake() { c.D.Wake() }

// DeadEvents lists dead events, oldest death first (queue.Outbox).
func (c *Callbacks) DeadEvents(ctx context.Context, limit int) ([]*queue.Event, error) {
	return c.Outbox.DeadEvents(ctx, limit)
}

// RetryDeadEvent makes a dead event due now (queue.Outbox).
func (c *Callbacks) RetryDeadEvent(ctx context.Context, id string) error {
	return c.Outbox.RetryDeadEvent(ctx, id)
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
	Status            sms.Status `json:"status,omitempty"` // absent for message.received
	Class             string     `json:"class,omitempty"`
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
func (s *Server) adminDeadCallbacks(w http.ResponseWriter, r *http.Request) {
	limit, perr := listLimit(r)
	if perr != nil {
		s.WriteError(w, r, perr)
		return
	}
	evs, err := s.Hooks.Callbacks.DeadEvents(r.Context(), limit)
	if err != nil {
		s.WriteError(w, r, fmt.Errorf("dead callbacks: %w", err))
		return
	}
	out := deadCallbacksResponse{Events: make([]adminEvent, 0, len(evs))}
	for _, e := range evs {
		a := adminEvent{ID: e.ID, Type: e.Type(), MessageID: e.MessageID,
			Producer: e.Producer, Reference: e.Reference, Status: e.Status, Class: e.Class.String(), At: e.At.UTC(),
			Attempts: e.Attempts, LastError: e.LastError, DeadAt: e.DeadAt.UTC(), PerMessageURL: e.CallbackURL != "",
			ProviderMessageID: e.ProviderID}
		if e.Reply != nil { // its id and time only: never the number or the text
			a.Status, a.Class = "", ""
		}
		out.Events = append(out.Events, a)
	}
	writeJSON(w, s.Log, "application/json", http.StatusOK, out)
}

type retriedCallback struct {
	ID string `json:"id"`
}

// adminRetryCallback makes a dead callback due again now.
func (s *Server) adminRetryCallback(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if len(id) > 64 {
		s.WriteError(w, r, errorf(KindNotFound, "no such dead callback"))
		return
	}
	if err := s.Hooks.Callbacks.RetryDeadEvent(r.Context(), id); err != nil {
		if errors.Is(err, queue.ErrNotFound) {
			s.WriteError(w, r, errorf(KindNotFound, "no such dead callback"))
			return
		}
		s.WriteError(w, r, fmt.Errorf("retry dead callback: %w", err))
		return
	}
	s.Hooks.Callbacks.Wake()
	writeJSON(w, s.Log, "application/json", http.StatusAccepted, retriedCallback{ID: id})
}
