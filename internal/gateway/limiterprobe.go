package gateway

import (
	"context"
	"time"

	"smsgw/internal/tick"
)

// limiterProbe asks Redis, once a second, whether it is back for each
// limiter that decides locally (the send limiter, the ingress quotas).
// Their breakers otherwise only try Redis on a decision, so a replica with
// nothing to send and no producer posting stayed in fallback after an
// outage, and SmsgwLimiterFallback kept paging, until its next message. A
// limiter that Redis decides for costs nothing here.
type limiterProbe struct {
	probes []prober
	t      tick.Ticker
}

// prober is a limiter whose breaker can be asked to try Redis
// (limiter.Shared, limiter.SharedKeys).
type prober interface {
	Probe(ctx context.Context)
}

// limiterProbeEvery matches the breakers' own retry interval: a probe
// more often would be refused by the breaker anyway.
const limiterProbeEvery = time.Second

func newLimiterProbe(probes ...prober) *limiterProbe { return &limiterProbe{probes: probes} }

// Start runs the probes every limiterProbeEvery until Stop.
func (p *limiterProbe) Start(ctx context.Context) { p.t.Start(ctx, limiterProbeEvery, p.runOnce) }

// Stop ends the loop and waits for it.
func (p *limiterProbe) Stop() { p.t.Halt() }

// runOnce probes each limiter once; a limiter in fallback logs its own
// recovery (the breaker's "redis is back" line).
func (p *limiterProbe) runOnce(ctx context.Context) error {
	for _, l := range p.probes {
		l.Probe(ctx)
	}
	return nil
}
