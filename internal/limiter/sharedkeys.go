package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SharedKeysConfig configures a SharedKeys limiter.
type SharedKeysConfig struct {
	Redis  *RedisKeys   // the shared key limiter; required
	Logger *slog.Logger // nil: discard
	// Registerer receives smsgw_limiter_ingress_mode; nil: no metrics.
	Registerer prometheus.Registerer
	// RedisTimeout bounds one Redis call; past it the call counts as a
	// failure and the decision is taken locally. Zero: 500 ms.
	RedisTimeout time.Duration
	// OnLocal, when set, runs for every decision taken locally because
	// Redis failed or the breaker is open.
	OnLocal func()
	// Outage is the process's knowledge of Redis failures, shared with
	// its other Redis users; nil: this limiter's own breaker only.
	Outage *Outage
}

// SharedKeys is the producer ingress limiter of a replica that shares Redis
// with others: it decides on Redis under the breaker policy of breaker.go
// (the send limiter's), and locally while Redis cannot answer. Locally each
// replica decides alone at the key's full rate, so the shared quota may be
// exceeded by the replica count until Redis answers again: ingress is a
// courtesy limit, the provider rate is guarded by the send limiter. It never
// fails open: every grant comes from Redis or from the local GCRA.
type SharedKeys struct {
	redis    *RedisKeys
	fallback *LocalKeys
	br       *breaker
	onLocal  func()
}

var _ KeyLimiter = (*SharedKeys)(nil)

// NewSharedKeys returns a SharedKeys limiter.
func NewSharedKeys(cfg SharedKeysConfig) (*SharedKeys, error) {
	if cfg.Redis == nil {
		return nil, errors.New("limiter: shared keys: Redis key limiter is required")
	}
	s := &SharedKeys{redis: cfg.Redis, fallback: NewLocalKeys(), onLocal: cfg.OnLocal}
	var gauge *prometheus.GaugeVec
	if cfg.Registerer != nil {
		gauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "smsgw_limiter_ingress_mode",
			Help: "1 for the mode producer ingress quotas are decided in (shared: Redis; fallback: this process alone), 0 otherwise.",
		}, []string{"mode"})
		if err := cfg.Registerer.Register(gauge); err != nil {
			return nil, fmt.Errorf("limiter: register metrics: %w", err)
		}
		setModeGauge(gauge, ModeShared)
	}
	s.br = newBreaker(breakerConfig{
		name: "ingress-redis", timeout: cfg.RedisTimeout, log: cfg.Logger, outage: cfg.Outage,
		lost: "ingress limiter: redis unavailable, deciding producer quotas locally",
		back: "ingress limiter: redis is back, deciding producer quotas on the shared schedule",
		onMode: func(m Mode) {
			if gauge != nil {
				setModeGauge(gauge, m)
			}
		},
	})
	return s, nil
}

// Mode is ModeShared while Redis decides and ModeFallback while the
// process decides alone.
func (s *SharedKeys) Mode() Mode { return s.br.Mode() }

// Probe asks Redis once while ingress quotas are decided locally, and
// does nothing otherwise; see breaker.probe.
func (s *SharedKeys) Probe(ctx context.Context) { s.br.probe(ctx, s.redis.reachable) }

// Allow decides cost units for key at rate r on Redis, or locally when
// Redis cannot answer (at once, without a Redis call, while the breaker is
// open; it opens without a call of its own while another Redis user of
// the process failed within redisRetryEvery, Outage). A caller too hurried for a Redis call to be a verdict (breaker.go)
// whose call timed out gets an error that wraps context.DeadlineExceeded.
func (s *SharedKeys) Allow(ctx context.Context, key string, r Rate, cost int) (KeyDecision, error) {
	if _, err := checkKeyRequest(key, r, cost); err != nil {
		return KeyDecision{}, err
	}
	var d KeyDecision
	err := s.br.do(ctx, func(ctx context.Context) error {
		var err error
		d, err = s.redis.Allow(ctx, key, r, cost)
		return err
	})
	switch {
	case err == nil:
		return d, nil
	case ctx.Err() != nil:
		return KeyDecision{}, fmt.Errorf("limiter: allow: %w", ctx.Err())
	case errors.Is(err, errCallerHurried):
		return KeyDecision{}, fmt.Errorf("limiter: allow: %w", err)
	}
	if s.onLocal != nil {
		s.onLocal()
	}
	return s.fallback.Allow(ctx, key, r, cost)
}

// setModeGauge sets 1 for cur and 0 for the other modes of a shared limiter.
func setModeGauge(g *prometheus.GaugeVec, cur Mode) {
	for _, mode := range allModes {
		v := 0.0
		if mode == cur {
			v = 1
		}
		g.WithLabelValues(string(mode)).Set(v)
	}
}
