package gateway

import (
	"context"
	"net/http"
	"time"
)

// readyCheck is one dependency /readyz asks about.
type readyCheck struct {
	name  string
	check func(ctx context.Context) error
}

type healthResponse struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks,omitempty"`
}

// readyTimeout bounds each readiness check.
const readyTimeout = time.Second

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	writeRaw(w, "application/json", http.StatusOK, []byte(`{"status":"ok"}`+"\n"))
}

// readyz is unready from the moment Stop begins, so load balancers stop
// sending before the listener drains; otherwise it asks the store and the
// limiter. Errors go to the log, not to the (unauthenticated) answer.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.stopping.Load() {
		writeJSON(w, s.log, "application/json", http.StatusServiceUnavailable, healthResponse{Status: "stopping"})
		return
	}
	out := healthResponse{Status: "ready", Checks: map[string]string{}}
	status := http.StatusOK
	for _, c := range s.checks {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		err := c.check(ctx)
		cancel()
		if err != nil {
			s.log.WarnContext(r.Context(), "readiness check failed", "check", c.name, "err", err)
			out.Checks[c.name] = "fail"
			out.Status, status = "unready", http.StatusServiceUnavailable
			continue
		}
		out.Checks[c.name] = "ok"
	}
	writeJSON(w, s.log, "application/json", status, out)
}
