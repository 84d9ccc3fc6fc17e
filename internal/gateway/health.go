package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
// limiter. Unready is a 503 problem like every error, with the state and
// the checks as members; it is not counted as a refused request. Errors
// go to the log, not to the (unauthenticated) answer.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.stopping.Load() {
		s.notReady(w, r, "stopping", nil)
		return
	}
	checks := map[string]string{}
	var failed []error
	for _, c := range s.checks {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		err := c.check(ctx)
		cancel()
		if err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", c.name, err))
			checks[c.name] = "fail"
			continue
		}
		checks[c.name] = "ok"
	}
	if len(failed) > 0 {
		// Anyone may ask, as often as they like: one line per 10 s.
		if n, ok := s.readyLog.Add(time.Now(), unknownLogEvery); ok {
			s.log.WarnContext(r.Context(), "readiness checks failed", "count", n, "err", errors.Join(failed...))
		}
		s.notReady(w, r, "unready", checks)
		return
	}
	s.readyLog.Reset()
	writeJSON(w, s.log, "application/json", http.StatusOK, healthResponse{Status: "ready", Checks: checks})
}

func (s *server) notReady(w http.ResponseWriter, r *http.Request, state string, checks map[string]string) {
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

// persistenceCheck asks Redis whether it persists the queue (append-only
// file) until it has an answer. Start asks once; while Redis cannot be
// asked (unreachable at start-up, or CONFIG and INFO both refused) the
// "persistence" readiness check fails with the reason, so /readyz stays 503,
// the log says why at ERROR, and smsgw_queue_redis_persistence{state=
// "unchecked"} is 1. It does not fail New: a replica that cannot reach Redis
// at start-up keeps running and turns ready once Redis answers, instead of
// crash-looping through an outage. Redis without AOF is reported (loud log,
// state "none") but does not make the replica unready: it is a
// configuration to fix, not a dependency that is down.
type persistenceCheck struct {
	check func(ctx context.Context) (appendOnly bool, err error)
	log   *slog.Logger
	gauge *prometheus.GaugeVec

	mu      sync.Mutex
	checked bool
}

// Persistence states, the label of smsgw_queue_redis_persistence.
const (
	persistUnchecked = "unchecked"
	persistAOF       = "appendonly"
	persistNone      = "none"
)

func newPersistenceCheck(check func(context.Context) (bool, error), reg prometheus.Registerer, log *slog.Logger) (*persistenceCheck, error) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "smsgw_queue_redis_persistence",
		Help: "1 for what is known of Redis persisting the queue: appendonly, none (no AOF: a Redis restart loses queued messages) or unchecked (Redis not asked yet).",
	}, []string{"state"})
	if err := reg.Register(g); err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	p := &persistenceCheck{check: check, log: log, gauge: g}
	p.set(persistUnchecked)
	return p, nil
}

func (p *persistenceCheck) set(cur string) {
	for _, st := range []string{persistUnchecked, persistAOF, persistNone} {
		v := 0.0
		if st == cur {
			v = 1
		}
		p.gauge.WithLabelValues(st).Set(v)
	}
}

// run asks Redis unless it has answered before; its error is the readiness
// check's.
func (p *persistenceCheck) run(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.checked {
		return nil
	}
	aof, err := p.check(ctx)
	if err != nil {
		return fmt.Errorf("redis persistence not checked yet: %w", err)
	}
	p.checked = true
	if aof {
		p.set(persistAOF)
	} else {
		p.set(persistNone) // the queue logged the loud warning
	}
	return nil
}

// startUp is Start's check: bounded, and logged at ERROR when Redis cannot
// be asked.
func (p *persistenceCheck) startUp(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, persistCheckBound)
	defer cancel()
	if err := p.run(ctx); err != nil {
		p.log.Error("could not check whether Redis persists the queue; /readyz reports unready until Redis answers", "err", err)
	}
}

// persistCheckBound bounds Start's persistence check.
const persistCheckBound = 5 * time.Second
