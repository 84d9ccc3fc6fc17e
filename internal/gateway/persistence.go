package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PersistenceCheck asks Redis whether it persists the queue (append-only
// file) until it has an answer. Start asks once; while Redis cannot be
// asked (unreachable at start-up, or CONFIG and INFO both refused) the
// "persistence" readiness check fails with the reason, so /readyz stays 503,
// the log says why at ERROR, and smsgw_queue_redis_persistence{state=
// "unchecked"} is 1. It does not fail New: a replica that cannot reach Redis
// at start-up keeps running and turns ready once Redis answers, instead of
// crash-looping through an outage. Redis without AOF is reported (loud log,
// state "none") but does not make the replica unready: it is a
// configuration to fix, not a dependency that is down.
type PersistenceCheck struct {
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

// NewPersistenceCheck asks check (the queue's CONFIG/INFO reading) and
// reports on the smsgw_queue_redis_persistence gauge of reg.
func NewPersistenceCheck(check func(context.Context) (bool, error), reg prometheus.Registerer, log *slog.Logger) (*PersistenceCheck, error) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "smsgw_queue_redis_persistence",
		Help: "1 for what is known of Redis persisting the queue: appendonly, none (no AOF: a Redis restart loses queued messages) or unchecked (Redis not asked yet).",
	}, []string{"state"})
	if err := reg.Register(g); err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	p := &PersistenceCheck{check: check, log: log, gauge: g}
	p.set(persistUnchecked)
	return p, nil
}

func (p *PersistenceCheck) set(cur string) {
	for _, st := range []string{persistUnchecked, persistAOF, persistNone} {
		v := 0.0
		if st == cur {
			v = 1
		}
		p.gauge.WithLabelValues(st).Set(v)
	}
}

// Run asks Redis unless it has answered before; its error is the readiness
// check's.
func (p *PersistenceCheck) Run(ctx context.Context) error {
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

// StartUp is Start's check: bounded, and logged at ERROR when Redis cannot
// be asked.
func (p *PersistenceCheck) StartUp(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, persistCheckBound)
	defer cancel()
	if err := p.Run(ctx); err != nil {
		p.log.Error("could not check whether Redis persists the queue; /readyz reports unready until Redis answers", "err", err)
	}
}

// persistCheckBound bounds Start's persistence check.
const persistCheckBound = 5 * time.Second
