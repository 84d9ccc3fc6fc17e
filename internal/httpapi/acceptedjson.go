package httpapi

import (
	"encoding/json"
	"strconv"
	"time"

	"smsgw/internal/state"
)

// marshalAccepted is json.Marshal(a), byte for byte, without reflection:
// every accepted message's answer is encoded once (and, keyed, stored).
// Anything the short path does not write exactly as encoding/json would
// (a string that needs escaping, an invalid class, a year outside 0 to
// 9999) goes to json.Marshal itself (TestMarshalAcceptedAgrees).
func marshalAccepted(a *AcceptedMessage) ([]byte, error) {
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

// marshalBody is json.Marshal(v), on marshalAccepted's short path for an
// accepted message.
func marshalBody(v any) ([]byte, error) {
	if a, ok := v.(AcceptedMessage); ok {
		return marshalAccepted(&a)
	}
	return json.Marshal(v)
}
