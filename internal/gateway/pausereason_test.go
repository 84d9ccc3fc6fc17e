package gateway

import (
	"net/http"
	"strings"
	"testing"

	"smsgw/internal/httpapi"
)

// TestPauseReasonNoNumbers: an operator pause's reason is logged, shown in
// the stats and on the dashboard, so like a suppression's it may not hold
// a phone number (a run of more than 5 digits): 400 naming reason, and the
// gateway is not paused. A reason with a ticket number of 5 digits passes.
func TestPauseReasonNoNumbers(t *testing.T) {
	h := start(t, embeddedMode, nil)
	r := h.post("/v1/admin/pause", keyAdmin, map[string]any{"reason": "call +819012345679 re incident"})
	wantProblem(t, r, http.StatusBadRequest, httpapi.KindInvalid, "reason")
	wantStatus(t, h.post("/v1/admin/pause", keyAdmin, map[string]any{"reason": strings.Repeat("x", 201)}), http.StatusBadRequest)
	if st := h.stats(); st.Pause.Paused {
		t.Fatal("a refused pause paused the gateway")
	}
	wantStatus(t, h.post("/v1/admin/pause", keyAdmin, map[string]any{"reason": "INC-12345 carrier outage"}), http.StatusOK)
	if strings.Contains(h.logs.String(), "9012345679") {
		t.Error("the refused reason's number reached the log")
	}
}
