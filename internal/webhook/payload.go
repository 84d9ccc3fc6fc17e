package webhook

import (
	"encoding/json"
	"time"

	"smsgw/internal/queue"
)

// Payload is the body of one status event (a reply's is ReplyPayload). It carries no phone number and
// no message text, ever: only what the producer needs to match the event to
// its own record (id, reference) and the outcome.
type Payload struct {
	Type      string    `json:"type"` // "message." + status
	Timestamp time.Time `json:"timestamp"`
	Data      Data      `json:"data"`
}

// Data is the event's message.
type Data struct {
	ID                string     `json:"id"`
	Reference         string     `json:"reference"`
	Status            string     `json:"status"`
	Class             string     `json:"class"`
	Segments          int        `json:"segments"`
	ProviderMessageID string     `json:"provider_message_id"`
	Error             *DataError `json:"error"` // null unless the status is a failure
	At                time.Time  `json:"at"`
}

// DataError says why a message failed or expired.
type DataError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Body is the exact bytes delivered for e. It depends only on the stored
// event, so every retry of an event sends the same body.
func Body(e *queue.Event) ([]byte, error) {
	if e.Reply != nil {
		return replyBody(e)
	}
	p := Payload{
		Type:      "message." + string(e.Status),
		Timestamp: e.At.UTC(),
		Data: Data{
			ID: e.MessageID, Reference: e.Reference, Status: string(e.Status), Class: e.Class.String(),
			Segments: e.Segments, ProviderMessageID: e.ProviderID, At: e.At.UTC(),
		},
	}
	if e.ErrorCode != "" {
		p.Data.Error = &DataError{Code: e.ErrorCode, Message: e.ErrorReason}
	}
	return json.Marshal(&p)
}
