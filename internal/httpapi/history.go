package httpapi

// GET /v1/admin/history: the last 15 minutes of send figures for the ops
// page, with the limits to draw them against and how long the backlog
// takes to drain at the current pace (opsview.Desk.History).

import (
	"net/http"
	"time"
)

func (s *Server) adminHistory(w http.ResponseWriter, r *http.Request) {
	out, err := s.Ops.History(r.Context())
	if err != nil {
		s.WriteError(w, r, &apiError{Kind: kindUnavailable, Detail: "the history store did not answer",
			RetryAfter: time.Second, Err: err})
		return
	}
	writeJSON(w, s.Log, "application/json", http.StatusOK, out)
}
