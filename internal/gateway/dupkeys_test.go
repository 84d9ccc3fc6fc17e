package gateway

import (
	"net/http"
	"slices"
	"testing"

	"smsgw/internal/httpapi"
)

// TestDuplicateKeysRefused: a member named twice, or
// named in another case than the contract's ("TO" for "to"), is a 400
// naming it; encoding/json would take the last one, or match the name
// case-insensitively, so a validator in front of us could read another
// number than the one we send to.
func TestDuplicateKeysRefused(t *testing.T) {
	h := start(t, embeddedMode, nil)
	const ok = `"body":"hi","class":"transactional"`
	for _, tc := range []struct {
		name, path, key, body, field string
	}{
		{"duplicate to", "/v1/messages", keyNotify, `{"to":"+819012345678","to":"+819087654321",` + ok + `}`, "to"},
		{"case variant", "/v1/messages", keyNotify, `{"to":"+819012345678","TO":"+819087654321",` + ok + `}`, "TO"},
		{"case variant alone", "/v1/messages", keyNotify, `{"To":"+819012345678",` + ok + `}`, "To"},
		{"duplicate body", "/v1/messages", keyNotify, `{"to":"+819012345678","body":"a",` + ok + `}`, "body"},
		{"otp duplicate", "/v1/otp", keyLogin, `{"to":"+819012345678","body":"123456","to":"+819087654321"}`, "to"},
		{"otp case variant", "/v1/otp", keyLogin, `{"to":"+819012345678","Body":"1","body":"123456"}`, "Body"},
		{"batch messages twice", "/v1/messages/batch", keyNotify,
			`{"messages":[{"to":"+819012345678",` + ok + `}],"messages":[]}`, "messages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.with(t).post(tc.path, tc.key, tc.body)
			wantStatus(t, r, http.StatusBadRequest)
			if f := r.fields(t); !slices.Contains(f, tc.field) {
				t.Errorf("errors name %v, want %q", f, tc.field)
			}
		})
	}
	r := h.post("/v1/messages/batch", keyNotify, `{"messages":[{"to":"+819012345678","To":"+819087654321",`+ok+`}]}`)
	wantStatus(t, r, http.StatusOK)
	var b httpapi.BatchResponse
	r.json(t, &b)
	if b.Rejected != 1 || b.Results[0].Status != http.StatusBadRequest || b.Results[0].Error.Errors[0].Field != "messages[0].To" {
		t.Errorf("batch item with a case variant: %s", r.body)
	}
	if len(sentRefs(h.sim)) != 0 {
		t.Error("a refused request reached the provider")
	}
}
