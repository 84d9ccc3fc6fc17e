package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SharedConfig configures a Shared limiter.
type SharedConfig struct {
	Redis *Redis // the shared limiter; required
	// Config is the shared limits the fallback divides; zero means the
	// Config Redis was built with.
	Config Config
	// MaxSenders is the most processes that may send at once (replicas ×
	// senders that each hold a limiter); the fallback runs at 1/MaxSenders
	// of every limit so that all of them together stay under the target.
	MaxSenders int
	Logger     *slog.Logger          // nil: discard
	Registerer prometheus.Registerer // nil: no metrics
	// RedisTimeout bounds one Redis call; past it the call counts as a
	// failure and the decision is taken locally. Zero: 500 ms.
	RedisTimeout time.Duration
	// Outage is the process's knowledge of Redis failures, shared with
	// its other Redis users; nil: this limiter's own breaker only.
	Outage *Outage
}

// Shared is the limiter of a replica that shares Redis with others. It
// decides on Redis; when Redis fails or the breaker is open it decides
// locally at the fallback rate. It never fails open: every grant comes from
// Redis or from the local fallback GCRA.
type Shared struct {
	redis    *Redis
	fallback *Local // also holds this process's copy of every pause it saw
	br       *breaker
	log      *slog.Logger
	metrics  *metrics
}

var _ Limiter = (*Shared)(nil)

// NewShared returns a Shared limiter.
func NewShared(cfg SharedConfig) (*Shared, error) {
	if cfg.Redis == nil {
		return nil, errors.New("limiter: shared: Redis limiter is required")
	}
	if cfg.MaxSenders < 1 {
		return nil, fmt.Errorf("limiter: shared: max_senders %d must be >= 1", cfg.MaxSenders)
	}
	limits := cfg.Config
	if limits.Global.PerSecond == 0 && limits.Global.Burst == 0 && len(limits.Classes) == 0 {
		limits = cfg.Redis.cfg
	}
	fallback, err := newLocal(fallbackConfig(limits, cfg.MaxSenders), monotonicClock())
	if err != nil {
		return nil, fmt.Errorf("limiter: shared: fallback: %w", err)
	}
	fallback.mode = ModeFallback
	s := &Shared{redis: cfg.Redis, fallback: fallback, log: cfg.Logger}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.br = newBreaker(breakerConfig{
		name: "limiter-redis", timeout: cfg.RedisTimeout, log: s.log,
		lost: "limiter: redis unavailable, deciding locally at the fallback rate",
		back: "limiter: redis is back, deciding on the shared schedule",
		// The fallback starts with its burst spent: the shared schedule
		// has just been sending at full rate.
		onOpen: fallback.spend,
		outage: cfg.Outage,
		onMode: func(m Mode) {
			if s.metrics != nil {
				s.metrics.setMode(m)
			}
		},
	})
	if cfg.Registerer != nil {
		m, err := newMetrics(cfg.Registerer, s)
		if err != nil {
			return nil, err
		}
		s.metrics = m
	}
	return s, nil
}

// fallbackConfig divides every limit by n. Rates divide exactly; a burst
// becomes max(1, burst/n) (rounded down): n processes deciding alone then
// release at most max(burst, n) units at once together, the shared burst
// whenever burst >= n, and a GCRA key needs a burst of at least 1 to grant
// anything.
func fallbackConfig(cfg Config, n int) Config {
	div := func(r Rate) Rate {
		return Rate{PerSecond: r.PerSecond / float64(n), Burst: max(1, r.Burst/n)}
	}
	out := Config{Global: div(cfg.Global)}
	if len(cfg.Classes) > 0 {
		out.Classes = make(map[string]Rate, len(cfg.Classes))
		for name, r := range cfg.Classes {
			out.Classes[name] = div(r)
		}
	}
	if len(cfg.Senders) > 0 {
		out.Senders = make(map[string]Rate, len(cfg.Senders))
		for name, r := range cfg.Senders {
			out.Senders[name] = div(r)
		}
	}
	return out
}

// Mode is ModeShared while Redis decides and ModeFallback while the
// process decides alone.
func (s *Shared) Mode() Mode { return s.br.Mode() }

// ClockSkew is this process's clock minus Redis time at the last answer.
func (s *Shared) ClockSkew() time.Duration { return s.redis.ClockSkew() }

// onRedis runs one Redis call under the breaker policy (breaker.go).
func (s *Shared) onRedis(ctx context.Context, call func(context.Context) error) error {
	return s.br.do(ctx, call)
}

// errHastyFallback is why a hasty request (Request.Hasty) was decided
// locally without asking Redis: the limiter is in fallback.
var errHastyFallback = errors.New("limiter: redis lost; a hasty request is decided locally")

// Reserve decides on Redis, or locally at the fallback rate when Redis
// cannot answer. A pause this process knows of holds in either mode. While
// another Redis user of the process failed recently (Outage) the breaker
// opens without a call of its own (breaker.joinOutage). In fallback a
// hasty request (Request.Hasty) does not try Redis. A caller
// too hurried for a Redis call to be a verdict (breaker.go) whose call
// timed out gets an error that wraps context.DeadlineExceeded. The
// fallback's slot is at most MaxWait from when the caller asked: the time
// a failed Redis call took is not granted twice.
func (s *Shared) Reserve(ctx context.Context, req Request) (Decision, error) {
	if _, err := checkRequest(req); err != nil {
		return Decision{}, err
	}
	if rem := s.fallback.pauseRemaining(); rem > 0 {
		d := Decision{RetryAfter: rem, Paused: true, Mode: s.Mode()}
		s.count(d)
		return d, nil
	}
	if rem := s.fallback.senderPauseRemaining(req.Sender); rem > 0 {
		d := Decision{RetryAfter: rem, SenderPaused: true, Mode: s.Mode()}
		s.count(d)
		return d, nil
	}
	var d Decision
	asked := time.Now()
	err := errHastyFallback
	if !req.Hasty || s.Mode() != ModeFallback {
		err = s.onRedis(ctx, func(ctx context.Context) error {
			var err error
			d, err = s.redis.Reserve(ctx, req)
			return err
		})
	}
	switch {
	case err == nil:
		if d.Paused {
			// Keep the shared pause locally too: it must hold if Redis
			// dies before it ends.
			_ = s.fallback.Pause(ctx, d.RetryAfter)
		}
		if d.SenderPaused {
			// The sender's pause likewise.
			_, _ = s.fallback.PauseSender(ctx, req.Sender, d.RetryAfter)
		}
		s.count(d)
		return d, nil
	case errors.Is(err, ErrCostExceedsBurst):
		return Decision{}, err
	case ctx.Err() != nil:
		return Decision{}, fmt.Errorf("limiter: reserve: %w", ctx.Err())
	case errors.Is(err, errCallerHurried):
		return Decision{}, fmt.Errorf("limiter: reserve: %w", err)
	}
	s.log.Debug("limiter: deciding locally", "err", err)
	req.MaxWait = max(0, req.MaxWait-time.Since(asked))
	d, err = s.fallback.Reserve(ctx, req)
	if err != nil {
		return Decision{}, err
	}
	s.count(d)
	return d, nil
}

func (s *Shared) count(d Decision) {
	if s.metrics != nil {
		s.metrics.count(d)
	}
}

// Pause stops sending for d on every replica (through Redis) and in this
// process (locally, so that it holds even if Redis fails before it ends). A
// shorter pause never shortens a longer one. When Redis cannot be reached
// the pause still holds here and Pause returns nil: the other replicas
// learn of the throttling from their own provider answers.
func (s *Shared) Pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("limiter: pause %s must be > 0", d)
	}
	if err := s.fallback.Pause(ctx, d); err != nil {
		return fmt.Errorf("limiter: pause: %w", err)
	}
	var inForce time.Duration
	err := s.onRedis(ctx, func(ctx context.Context) error {
		var err error
		inForce, err = s.redis.pause(ctx, d)
		return err
	})
	switch {
	case err == nil:
		// A longer shared pause set by another replica holds here too.
		if inForce > d {
			_ = s.fallback.Pause(ctx, inForce)
		}
	case ctx.Err() != nil:
		return fmt.Errorf("limiter: pause: %w", ctx.Err())
	default:
		s.log.Debug("limiter: pause kept locally only", "err", err, "pause", d)
	}
	return nil
}

// PauseSender stops sending from sender for d on every replica (through
// Redis) and in this process (locally, so that it holds even if Redis
// fails before it ends); it returns the pause in force, never shortened.
// When Redis cannot be reached the pause still holds here.
func (s *Shared) PauseSender(ctx context.Context, sender string, d time.Duration) (time.Duration, error) {
	if d <= 0 {
		return 0, fmt.Errorf("limiter: sender pause %s must be > 0", d)
	}
	inForce, err := s.fallback.PauseSender(ctx, sender, d)
	if err != nil {
		return 0, fmt.Errorf("limiter: sender pause: %w", err)
	}
	var shared time.Duration
	err = s.onRedis(ctx, func(ctx context.Context) error {
		var err error
		shared, err = s.redis.PauseSender(ctx, sender, d)
		return err
	})
	switch {
	case err == nil:
		if shared > inForce {
			// A longer pause another replica set holds here too.
			inForce, _ = s.fallback.PauseSender(ctx, sender, shared)
		}
	case ctx.Err() != nil:
		return inForce, fmt.Errorf("limiter: sender pause: %w", ctx.Err())
	default:
		s.log.Debug("limiter: sender pause kept locally only", "err", err, "pause", d)
	}
	return inForce, nil
}

// Resume ends the pause here and on Redis (an operator's override). Other
// replicas keep a pause they had already seen until it ends; when Redis
// cannot be reached the error says so.
func (s *Shared) Resume(ctx context.Context) error {
	if err := s.fallback.Resume(ctx); err != nil {
		return fmt.Errorf("limiter: resume: %w", err)
	}
	return s.onRedis(ctx, s.redis.Resume)
}

// Probe asks Redis once (a read of the schedule) while this limiter is in
// fallback, and does nothing otherwise; see breaker.probe.
func (s *Shared) Probe(ctx context.Context) {
	s.br.probe(ctx, func(ctx context.Context) error {
		_, err := s.redis.State(ctx)
		return err
	})
}

// State reports the shared schedule when Redis answers, else the local
// fallback's.
func (s *Shared) State(ctx context.Context) (State, error) {
	var st State
	err := s.onRedis(ctx, func(ctx context.Context) error {
		var err error
		st, err = s.redis.State(ctx)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return State{}, fmt.Errorf("limiter: state: %w", ctx.Err())
		}
		if st, err = s.fallback.State(ctx); err != nil {
			return State{}, err
		}
	}
	st.Mode = s.Mode()
	st.PauseRemaining = max(st.PauseRemaining, s.fallback.pauseRemaining())
	return st, nil
}

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
