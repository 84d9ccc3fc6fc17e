package httpapi

import (
	"encoding/json"

	"smsgw/internal/httpapi/accepted"
)

// marshalBody is json.Marshal(v), on accepted.Marshal's short path for an
// accepted message.
func marshalBody(v any) ([]byte, error) {
	if a, ok := v.(AcceptedMessage); ok {
		return accepted.Marshal(&a)
	}
	return json.Marshal(v)
}
