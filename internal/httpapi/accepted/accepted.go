// Package accepted is an accepted message's answer: its body (Message),
// written without reflection (Marshal), its Location, and the compact form
// its stored first answer is kept in (form.go).
package accepted

import (
	"encoding/json"
	"strconv"
	"time"

	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// Message is the 202 body of POST /v1/messages and of each
// accepted batch item.
type Message struct {
	ID              string     `json:"id"`
	Status          sms.Status `json:"status"`
	Class           sms.Class  `json:"class"`
	Segments        int        `json:"segments"`
	Encoding        string     `json:"encoding"`
	EstimatedSendAt time.Time  `json:"estimated_send_at"`
	SendAt          *time.Time `json:"send_at,omitempty"`
	ExpiresAt       *time.Time `json:"expires_at,omitempty"`
}

// Location is the Location of the message id's answer.
func Location(id string) string { return "/v1/messages/" + id }

// Marshal is json.Marshal(a), byte for byte, without reflection:
// every accepted message's answer is encoded once (and, keyed, stored).
// Anything the short path does not write exactly as encoding/json would
// (a string that needs escaping, an invalid class, a year outside 0 to
// 9999) goes to json.Marshal itself (TestMarshalAcceptedAgrees).
func Marshal(a *Message) ([]byte, error) {
	if !a.Class.Valid() || !state.PlainJSON(a.ID) || !state.PlainJSON(string(a.Status)) || !state.PlainJSON(a.Encoding) ||
		!jsonYear(a.EstimatedSendAt) || a.SendAt != nil && !jsonYear(*a.SendAt) || a.ExpiresAt != nil && !jsonYear(*a.ExpiresAt) {
		return json.Marshal(a)
	}
	b := make([]byte, 0, 256)
	b = append(b, `{"id":"`...)
	b = append(b, a.ID...)
	b = append(b, `","status":"`...)
	b = append(b, a.Status...)
	b = append(b, `","class":"`...)
	b = append(b, a.Class.String()...)
	b = append(b, `","segments":`...)
	b = strconv.AppendInt(b, int64(a.Segments), 10)
	b = append(b, `,"encoding":"`...)
	b = append(b, a.Encoding...)
	b = append(b, `","estimated_send_at":`...)
	b = appendJSONTime(b, a.EstimatedSendAt)
	if a.SendAt != nil {
		b = append(b, `,"send_at":`...)
		b = appendJSONTime(b, *a.SendAt)
	}
	if a.ExpiresAt != nil {
		b = append(b, `,"expires_at":`...)
		b = appendJSONTime(b, *a.ExpiresAt)
	}
	return append(b, '}'), nil
}

// jsonYear: time.Time.MarshalJSON accepts t (its year is 0 to 9999).
func jsonYear(t time.Time) bool {
	y := t.Year()
	return y >= 0 && y <= 9999
}

// appendJSONTime is time.Time.MarshalJSON for a year jsonYear accepts.
func appendJSONTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// Of is the 202 body for m, just stored (queued, or scheduled
// before its send_at).
func Of(m *sms.Message, eta, now time.Time) Message {
	seg := Segments(m)
	if nb := m.NotBefore; nb.After(eta) {
		eta = nb
	}
	stored := sms.Message{Status: sms.StatusQueued, SendAt: m.SendAt}
	return Message{
		ID: m.ID, Status: stored.StatusAt(now), Class: m.Class, Segments: seg.Count, Encoding: string(seg.Encoding),
		EstimatedSendAt: eta.UTC().Truncate(time.Millisecond), SendAt: OptTime(m.SendAt), ExpiresAt: OptTime(m.ExpiresAt),
	}
}

// Segments is how m is sent: from its body, or what a final record (no
// body) kept of it.
func Segments(m *sms.Message) sms.Segments {
	if m.Body == "" && m.Encoding != "" {
		return sms.Segments{Count: m.Segments, Encoding: m.Encoding}
	}
	return sms.CountSegments(m.Body)
}

// OptTime is t in UTC for an optional JSON field; nil when zero.
func OptTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
