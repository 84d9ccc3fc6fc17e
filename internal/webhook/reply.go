package webhook

import (
	"encoding/json"
	"time"

	"smsgw/internal/queue"
)

// ReplyPayload is the body of a message.received event: a message a
// recipient sent to one of the account's numbers, for the producer that
// last messaged that recipient from it. Unlike a status event it carries
// a number and text, so it goes to that producer's webhook url only.
type ReplyPayload struct {
	Type      string    `json:"type"` // "message.received"
	Timestamp time.Time `json:"timestamp"`
	Data      ReplyData `json:"data"`
}

// ReplyData is the reply.
type ReplyData struct {
	ID   string    `json:"id"`   // stable per inbound message: a vendor's retry has the same
	From string    `json:"from"` // the recipient, E.164
	To   string    `json:"to"`   // our number, as the vendor names it
	Text string    `json:"text"`
	At   time.Time `json:"at"` // when the vendor received it
}

// replyBody is Body for a reply's event.
func replyBody(e *queue.Event) ([]byte, error) {
	r := e.Reply
	return json.Marshal(&ReplyPayload{Type: e.Type(), Timestamp: r.At.UTC(),
		Data: ReplyData{ID: r.ID, From: r.From, To: r.To, Text: r.Text, At: r.At.UTC()}})
}
