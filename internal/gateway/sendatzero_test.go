package gateway

import (
	"net/http"
	"testing"

	"smsgw/internal/httpapi"
)

// send_at at the zero instant of Go's time (0001-01-01T00:00:00Z, in any
// offset) is a time in the past like any other, not "send_at not given":
// a 400 naming send_at, on the single (in Redis mode the one-trip path) and
// the batch endpoint, as a second later is.
func TestSendAtZeroTimeRefused(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, nil)
			for _, at := range []string{"0001-01-01T00:00:00Z", "0001-01-01T09:00:00+09:00", "0001-01-01T00:00:00.000Z", "0001-01-01T00:00:01Z"} {
				r := h.post("/v1/messages", keyNotify, msg("transactional", "send_at", at))
				if r.status != http.StatusBadRequest {
					t.Errorf("send_at %s: status %d, want 400; body %s", at, r.status, r.body)
				} else if f := r.fields(t); len(f) != 1 || f[0] != "send_at" {
					t.Errorf("send_at %s: fields %v, want [send_at]", at, f)
				}
				b := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{msg("transactional", "send_at", at)}})
				wantStatus(t, b, http.StatusOK)
				var br httpapi.BatchResponse
				b.json(t, &br)
				if it := br.Results[0]; it.Status != http.StatusBadRequest || it.Error == nil ||
					len(it.Error.Errors) != 1 || it.Error.Errors[0].Field != "messages[0].send_at" {
					t.Errorf("send_at %s: batch item %+v, want 400 naming messages[0].send_at", at, it)
				}
			}
			if n := len(h.sim.Accepted()); n != 0 {
				t.Errorf("%d messages sent with a send_at in the past", n)
			}
		})
	}
}
