package queue

import (
	"context"
	"time"

	"smsgw/internal/sms"
)

// The outbox holds the status events owed to producers (status callbacks).
// A backend writes an event in the same atomic step as the status change it
// reports (the transition's script or transaction calls the backend's one
// outbox writer), so a crash can lose neither the change nor its event. Only
// messages stored with Callbacks get events. Any replica claims due events
// under a lease, delivers them and acks; a lease that expires makes the
// event claimable again with the same ID, so a receiver may see an event
// twice (at least once) but always with the same id and body.

// Error codes of events (Event.ErrorCode).
const (
	EventErrorRejected    = "rejected"           // the provider refused the message for good
	EventErrorExhausted   = "attempts_exhausted" // every attempt failed temporarily (a dead letter)
	EventErrorExpired     = "expired"            // its TTL passed before it could be sent
	EventErrorUndelivered = "undelivered"        // the provider's receipt says the handset did not get it
	EventErrorOptedOut    = "opted_out"          // the provider refused it: the recipient opted out (status suppressed)
	// EventErrorSuppressed: its number was on the suppression list when
	// the send loop took it, so it was never sent (status suppressed).
	EventErrorSuppressed = "suppressed"
)

// MaxEventError bounds Event.LastError.
const MaxEventError = 200

// Event is one status event of one message, as stored in the outbox.
type Event struct {
	ID          string // the webhook-id: unique per event, the same on every retry
	MessageID   string
	Producer    string
	CallbackURL string // the message's callback_url; empty: the producer's webhook url
	Status      sms.Status
	Reference   string
	Class       sms.Class
	Segments    int
	ProviderID  string
	ErrorCode   string    // EventError*, empty when Status is not a failure
	ErrorReason string    // the message's last error: short, safe text
	At          time.Time // when the status changed (the event's timestamp)

	Attempts  int       // delivery attempts spent
	LastError string    // what the last delivery attempt got (status code, timeout); safe text
	Dead      bool      // given up; listed by DeadEvents
	DeadAt    time.Time // when it was given up

	// Reply is set on a reply's event (message.received, Status
	// StatusReceived, MessageID the reply's id; see Routes); nil on a
	// status event.
	Reply *Reply
}

// LeasedEvent is an event claimed for delivery.
type LeasedEvent struct {
	Event *Event
	Token string
}

// EventRetry ends a claim of an event that was not delivered.
type EventRetry struct {
	After        time.Duration // not claimed again before now+After
	SpendAttempt bool          // false when the event was not tried (endpoint busy, breaker open)
	LastError    string        // safe text; cut to MaxEventError
	// MaxAge is how long after the event was written it is retried; a retry
	// that would fall later makes the event dead instead.
	MaxAge time.Duration
}

// OutboxStats is the outbox's depth.
type OutboxStats struct {
	Backlog   int64         // events not yet delivered (due, scheduled for a retry or claimed)
	Dead      int64         // events given up
	OldestAge time.Duration // age of the oldest undelivered event (0 if none)
}

// Outbox is the event side of a queue backend.
type Outbox interface {
	// ClaimEvents leases up to max due events, oldest due first.
	ClaimEvents(ctx context.Context, owner string, lease time.Duration, max int) ([]*LeasedEvent, error)
	// AckEvent removes a delivered event; ErrLeaseLost when the claim is no
	// longer held (it expired and someone else claimed it).
	AckEvent(ctx context.Context, le *LeasedEvent) error
	// RetryEvent ends the claim and makes the event due again after
	// o.After, or dead when that passes o.MaxAge (dead is then true).
	RetryEvent(ctx context.Context, le *LeasedEvent, o EventRetry) (dead bool, err error)
	// DeadEvents lists dead events, oldest death first.
	DeadEvents(ctx context.Context, limit int) ([]*Event, error)
	// RetryDeadEvent makes a dead event due now with its attempts reset and
	// a new MaxAge window (its id and body stay the same); ErrNotFound when
	// no dead event has that id.
	RetryDeadEvent(ctx context.Context, id string) error
	OutboxStats(ctx context.Context) (OutboxStats, error)
}

// EventErrorCode is the error code of an event for a message ending in
// status (dead: a dead letter). Suppressed is the provider's refusal
// (opted_out); a take that ends a message because its number is on the
// suppression list writes EventErrorSuppressed instead.
func EventErrorCode(status sms.Status, dead bool) string {
	switch {
	case status == sms.StatusExpired:
		return EventErrorExpired
	case status == sms.StatusFailed && dead:
		return EventErrorExhausted
	case status == sms.StatusFailed:
		return EventErrorRejected
	case status == sms.StatusUndelivered:
		return EventErrorUndelivered
	case status == sms.StatusSuppressed:
		return EventErrorOptedOut
	}
	return ""
}
