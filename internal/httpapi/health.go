package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// ReadyCheck is one dependency /readyz asks about.
type ReadyCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

type healthResponse struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks,omitempty"`
}

// readyTimeout bounds each readiness check.
const readyTimeout = time.Second

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeRaw(w, "application/json", http.StatusOK, []byte(`{"status":"ok"}`+"\n"))
}

// readyz is unready from the moment Stop begins, so load balancers stop
// sending before the listener drains; otherwise it asks the store and the
// limiter. Unready is a 503 problem like every error, with the state and
// the checks as members; it is not counted as a refused request. Errors
// go to the log, not to the (unauthenticated) answer: the first at once,
// then one line per 10 s with the count of unready answers it stands for.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.Stopping.Load() {
		s.notReady(w, r, "stopping", nil)
		return
	}
	checks := map[string]string{}
	var failed []error
	for _, c := range s.Served.Checks {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		err := c.Check(ctx)
		cancel()
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", c.Name, err))
			checks[c.Name] = "fail"
			continue
		}
		checks[c.Name] = "ok"
	}
	if len(failed) > 0 {
		// Anyone may ask, as often as they like: one line per 10 s.
		if n, ok := s.readyLog.Add(time.Now(), unknownLogEvery); ok {
			s.Log.WarnContext(r.Context(), "readiness checks failed", "count", n, "err", errors.Join(failed...))
		}
		s.notReady(w, r, "unready", checks)
		return
	}
	s.readyLog.Reset()
	writeJSON(w, s.Log, "application/json", http.StatusOK, healthResponse{Status: "ready", Checks: checks})
}

func (s *Server) notReady(w http.ResponseWriter, r *http.Request, state string, checks map[string]string) {
	detail := "the gateway is stopping"
	if state != "stopping" {
		detail = "a dependency is unreachable (see checks)"
	}
	e := &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Detail: detail,
		Extra: map[string]any{"state": state}}
	if checks != nil {
		e.Extra["checks"] = checks
	}
	s.writeProblem(w, problemFor(r, e), e)
}
