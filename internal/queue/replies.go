package queue

import (
	"context"
	"errors"
	"time"

	"smsgw/internal/sms"
)

// Replies: a message a recipient sends back to one of the account's
// numbers goes to the producer that last messaged that recipient from that
// number (docs/design.md section 3, "Replies"). A backend keeps, for each
// (our sender, recipient) pair a send used, the producer that sent last,
// known only by a key the caller derives (a keyed hash of both: the store
// never holds the number), for the retention; and it writes a reply as a
// message.received event to the same outbox as status events, in one
// atomic step that also remembers the reply's id for ReplyMemory, so that
// a vendor's retry of the same inbound message is one event.

// StatusReceived is the Status of a reply's event (Event.Reply set): the
// event's type is message.received. No message ever has it.
const StatusReceived sms.Status = "received"

// ReplyMemory is how long a reply's id is remembered once written: a
// vendor retrying the same inbound message within it (Vonage retries for
// 24 hours) writes no second event.
const ReplyMemory = 48 * time.Hour

// Bounds of a reply as stored: longer fields are refused (the HTTP edge
// bounds the inbound body well below MaxReplyText).
const (
	MaxReplyNumber = 64     // From, To
	MaxReplyText   = 16_384 // Text
	MaxReplyID     = 80     // ID
	MaxRouteKey    = 128    // a route key
)

// Reply is one inbound message for a producer: the body of its
// message.received event. It carries a number and text: never logged,
// never shown by the admin API.
type Reply struct {
	ID   string    // stable per inbound message (the event's webhook-id is "evt_" + ID)
	From string    // the recipient who replied, E.164
	To   string    // our number it was sent to, as the vendor names it
	Text string    // the whole text ("" when the vendor gave none the gateway reads)
	At   time.Time // when the vendor received it (else when the gateway did)
}

// ErrReplyInvalid is a reply or route key outside the bounds above.
var ErrReplyInvalid = errors.New("queue: reply or route key out of bounds")

// CheckReply is the rule every backend applies to AddReply.
func CheckReply(producer string, r Reply) error {
	if producer == "" || r.ID == "" || len(r.ID) > MaxReplyID || r.From == "" || len(r.From) > MaxReplyNumber ||
		len(r.To) > MaxReplyNumber || len(r.Text) > MaxReplyText || r.At.IsZero() {
		return ErrReplyInvalid
	}
	return nil
}

// CheckRouteKey is the rule every backend applies to a route key.
func CheckRouteKey(key string) error {
	if key == "" || len(key) > MaxRouteKey {
		return ErrReplyInvalid
	}
	return nil
}

// ReplyEventID is the webhook-id of reply id's event.
func ReplyEventID(id string) string { return "evt_" + id }

// Routes is the reply side of a queue backend.
type Routes interface {
	// RememberRoute records that producer sent the latest message of the
	// pair key stands for, kept for the backend's retention (a later send
	// of the pair replaces it and starts the retention again).
	RememberRoute(ctx context.Context, key, producer string) error
	// Route is the producer of the first of keys that has one, in order,
	// and that key's index; -1 when none has.
	Route(ctx context.Context, keys []string) (producer string, index int, err error)
	// AddReply writes r as a message.received event for producer (to its
	// webhook url: the event has no CallbackURL), unless a reply with its
	// id was written within ReplyMemory: false then, and nothing changes.
	AddReply(ctx context.Context, producer string, r Reply) (added bool, err error)
}

// Type is the event's type: message.received for a reply, else
// "message." and its status.
func (e *Event) Type() string { return "message." + string(e.Status) }
