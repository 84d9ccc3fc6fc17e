package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/dispatch"
	"smsgw/internal/history"
	"smsgw/internal/httpapi"
	"smsgw/internal/keyspace"
	"smsgw/internal/limiter"
	"smsgw/internal/opsview"
	"smsgw/internal/queue"
	"smsgw/internal/queue/embedded"
	"smsgw/internal/queue/redisq"
	"smsgw/internal/state"
	"smsgw/internal/tick"
)

// backend is what one mode provides the App: the queue, the limiters and
// the shared state, with the readiness checks, the loops Start runs and the
// stop stack of what was opened. newEmbeddedBackend and newRedisBackend
// build the same shape; nothing else in the App depends on the mode.
type backend struct {
	mode     string // "embedded" | "redis"
	scope    string // of the counters: scopeProcess | scopeShared
	queue    queue.Queue
	enq      admission.Enqueuer     // the queue, or a coalescer in front of it
	script   *admission.ScriptStore // Redis: single messages admitted and stored in one round trip
	limiter  limiter.Limiter
	ingress  limiter.KeyLimiter
	idem     state.Idempotency
	pause    *admission.OperatorPause
	shelf    func(producer string) queue.Shelf // what a producer pause's set-aside checks (dispatch.Config.Shelf)
	counters state.Counters
	guard    dispatch.Guard
	history  history.Store // the last 15 minutes of send figures
	numbers  state.NumberLimits
	sticky   state.StickySenders // sender pools' recipients (admission.Pools)
	suppress state.Suppressions
	// listed is the suppression list as the send loop's takes read it
	// (queue.Suppression): the list's HASH in the take script with
	// Redis, the list's own file asked in the take transaction embedded.
	listed queue.Suppression
	// outage is what the process knows of Redis failures, shared by the
	// limiters and the OTP's protection check (limiter.Outage).
	outage  *limiter.Outage
	checks  []httpapi.ReadyCheck
	loops   []loop            // started by Start in order
	persist *PersistenceCheck // Redis only: asked once by Start
	stops   stopStack
}

// deps are what New hands both backends.
type deps struct {
	log     *slog.Logger
	reg     prometheus.Registerer
	now     func() time.Time
	metrics *opsview.APIMetrics
	quiet   *tick.QuietGate // whether this replica is idle (the dispatcher's answer)
	hook    redis.Hook      // Options.RedisHook
}

// newEmbeddedBackend: the bbolt store, the local limiters, and the shared
// state in this process's memory (exactly one replica).
func newEmbeddedBackend(cfg config.Config, d deps) (_ *backend, err error) {
	b := &backend{mode: "embedded", scope: opsview.ScopeProcess}
	defer b.closeOnError(&err, d.log)
	eq, err := embedded.Open(embedded.Config{Path: cfg.Store.Path, Logger: d.log,
		Retention: cfg.Messages.Retention, IdempotencyWindow: config.IdempotencyWindow, Registerer: d.reg})
	if err != nil {
		return nil, fmt.Errorf("gateway: queue: %w", err)
	}
	b.stops.push("queue", eq.Close)
	b.queue, b.enq = eq, eq
	b.checks = append(b.checks, httpapi.ReadyCheck{Name: "store", Check: func(ctx context.Context) error { _, err := eq.Stats(ctx); return err }})
	if b.limiter, err = limiter.NewLocal(limiterConfig(cfg)); err != nil {
		return nil, fmt.Errorf("gateway: limiter: %w", err)
	}
	b.ingress = limiter.NewLocalKeys()
	if b.idem, err = state.NewLocalIdempotency(config.IdempotencyWindow, 0); err != nil {
		return nil, fmt.Errorf("gateway: idempotency store: %w", err)
	}
	b.pause = admission.NewOperatorPause(state.NewLocalPause(), d.now)
	b.pause.SetScopes(state.NewLocalScopedPauses(), producerNames(cfg))
	b.shelf = func(producer string) queue.Shelf {
		scope := state.ProducerScope(producer)
		return queue.Shelf{Held: func() bool { return b.pause.HeldNow(scope) }}
	}
	b.loops = append(b.loops, admission.NewShelfKeeper(b.pause, eq, admission.ShelfEvery, d.log))
	if b.counters, err = state.NewLocalCounters(opsview.TotalsFields()); err != nil {
		return nil, fmt.Errorf("gateway: counters: %w", err)
	}
	if b.history, err = history.NewLocal(history.Config{}, nil); err != nil {
		return nil, fmt.Errorf("gateway: history: %w", err)
	}
	b.numbers = state.NewLocalNumberLimits(0)
	b.sticky = state.NewLocalStickySenders(0)
	ls, err := state.OpenLocalSuppressions(cfg.Store.Path, cfg.Protection.MaxSuppressions)
	if err != nil {
		return nil, fmt.Errorf("gateway: suppression list: %w", err)
	}
	b.stops.push("suppression list", ls.Close)
	b.suppress = ls
	// The list stays in its own file (it holds the number key too, and
	// the queue may not import state): the queue's take transaction asks
	// it, read-only, about each message it reaches.
	b.listed = queue.Suppression{Listed: ls.Contains}
	window, err := state.NewLocalThrottles(cfg.Dispatch.SuspensionGuard.Window)
	if err != nil {
		return nil, fmt.Errorf("gateway: suspension guard: %w", err)
	}
	return b, b.finish(cfg, window)
}

// newRedisBackend: the Redis queue and limiters with their local
// fallbacks, and the shared state under the account's hash tag. It opens a
// client but contacts nothing: Start asks Redis whether it persists the
// queue (persistenceCheck says what happens when it cannot).
func newRedisBackend(cfg config.Config, d deps) (_ *backend, err error) {
	b := &backend{mode: "redis", scope: opsview.ScopeShared, outage: &limiter.Outage{}}
	defer b.closeOnError(&err, d.log)
	sp, err := keyspace.New(cfg.Account)
	if err != nil {
		return nil, fmt.Errorf("gateway: account: %w", err)
	}
	client := newRedisClient(cfg.Redis)
	if d.hook != nil {
		client.AddHook(d.hook)
	}
	b.stops.push("redis client", client.Close)
	rq, err := redisq.New(redisq.Config{Client: client, Account: cfg.Account, Logger: d.log,
		WaitReplicas: cfg.Redis.WaitReplicas, WaitTimeout: cfg.Redis.WaitTimeout,
		Retention: cfg.Messages.Retention, IdempotencyWindow: config.IdempotencyWindow, Registerer: d.reg})
	if err != nil {
		return nil, fmt.Errorf("gateway: queue: %w", err)
	}
	b.stops.push("queue", rq.Close)
	// Many concurrent POSTs share one enqueue script round trip. (The
	// embedded store already shares one commit between them.)
	co := admission.NewCoalescer(rq)
	b.queue, b.enq, b.loops = rq, co, append(b.loops, co, newCompactor(rq, d.log, d.quiet))
	if b.persist, err = NewPersistenceCheck(rq.CheckPersistence, d.reg, d.log); err != nil {
		return nil, err
	}
	b.checks = append(b.checks,
		httpapi.ReadyCheck{Name: "redis", Check: func(ctx context.Context) error { return client.Ping(ctx).Err() }},
		httpapi.ReadyCheck{Name: "store", Check: func(ctx context.Context) error { _, err := rq.Stats(ctx); return err }},
		httpapi.ReadyCheck{Name: "persistence", Check: b.persist.Run})
	if err := b.redisLimiters(cfg, d, client); err != nil {
		return nil, err
	}
	window, err := b.redisState(cfg, d, client, sp)
	if err != nil {
		return nil, err
	}
	keys, err := limiter.NewRedisKeys(client, cfg.Account)
	if err != nil {
		return nil, fmt.Errorf("gateway: ingress limiter: %w", err)
	}
	idem, ok1 := b.idem.(*state.RedisIdempotency)
	sup, ok2 := b.suppress.(*state.RedisSuppressions)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("gateway: redis mode without the redis idempotency store and suppression list")
	}
	b.script = &admission.ScriptStore{Enq: co, Idem: idem, Keys: keys}
	b.listed = queue.Suppression{Key: sup.IndexKey()} // read inside the take script, under the account's hash tag
	return b, b.finish(cfg, window)
}

// redisLimiters are the send limiter and the ingress keys, each on Redis
// behind the one breaker policy, with its local fallback.
func (b *backend) redisLimiters(cfg config.Config, d deps, client redis.UniversalClient) error {
	lcfg := limiterConfig(cfg)
	rl, err := limiter.NewRedis(client, cfg.Account, lcfg)
	if err != nil {
		return fmt.Errorf("gateway: limiter: %w", err)
	}
	send, err := limiter.NewShared(limiter.SharedConfig{Redis: rl, Config: lcfg, MaxSenders: cfg.Limits.MaxSenders,
		Logger: d.log, Registerer: d.reg, RedisTimeout: cfg.Redis.Timeout, Outage: b.outage})
	if err != nil {
		return fmt.Errorf("gateway: limiter: %w", err)
	}
	keys, err := limiter.NewRedisKeys(client, cfg.Account)
	if err != nil {
		return fmt.Errorf("gateway: ingress limiter: %w", err)
	}
	ingress, err := limiter.NewSharedKeys(limiter.SharedKeysConfig{Redis: keys, Logger: d.log, Registerer: d.reg,
		RedisTimeout: cfg.Redis.Timeout, OnLocal: d.metrics.IngressFallback.Inc, Outage: b.outage})
	if err != nil {
		return fmt.Errorf("gateway: ingress limiter: %w", err)
	}
	b.limiter, b.ingress = send, ingress
	b.loops = append(b.loops, newLimiterProbe(send, ingress))
	return nil
}

// redisState is the shared state of the account; it returns the 429 window
// for the guard.
func (b *backend) redisState(cfg config.Config, d deps, client redis.UniversalClient, sp keyspace.Space) (dispatch.ThrottleWindow, error) {
	var err error
	if b.idem, err = state.NewRedisIdempotency(client, sp, config.IdempotencyWindow); err != nil {
		return nil, fmt.Errorf("gateway: idempotency store: %w", err)
	}
	ps, err := state.NewRedisPause(client, sp)
	if err != nil {
		return nil, fmt.Errorf("gateway: operator pause: %w", err)
	}
	b.pause = admission.NewOperatorPause(ps, d.now)
	sps, err := state.NewRedisScopedPauses(client, sp)
	if err != nil {
		return nil, fmt.Errorf("gateway: operator pause: %w", err)
	}
	b.pause.SetScopes(sps, producerNames(cfg))
	b.shelf = func(producer string) queue.Shelf {
		return queue.Shelf{Key: sps.Key(), Field: state.ProducerScope(producer)}
	}
	pp := admission.NewPausePoller(b.pause, admission.PausePollEvery, d.log)
	pp.T.Quiet, pp.T.QuietEvery = d.quiet, admission.PauseIdlePoll
	b.loops = append(b.loops, pp)
	if sv, ok := b.queue.(queue.Shelver); ok {
		b.loops = append(b.loops, admission.NewShelfKeeper(b.pause, sv, admission.ShelfEvery, d.log))
	}
	if b.counters, err = state.NewRedisCounters(client, sp, opsview.TotalsFields()); err != nil {
		return nil, fmt.Errorf("gateway: counters: %w", err)
	}
	if b.history, err = history.NewRedis(client, sp, history.Config{}); err != nil {
		return nil, fmt.Errorf("gateway: history: %w", err)
	}
	if b.numbers, err = state.NewRedisNumberLimits(client, sp); err != nil {
		return nil, fmt.Errorf("gateway: OTP per-number limit: %w", err)
	}
	if b.sticky, err = state.NewRedisStickySenders(client, sp); err != nil {
		return nil, fmt.Errorf("gateway: sender pools: %w", err)
	}
	if b.suppress, err = state.NewRedisSuppressions(client, sp, cfg.Protection.MaxSuppressions); err != nil {
		return nil, fmt.Errorf("gateway: suppression list: %w", err)
	}
	window, err := state.NewRedisThrottles(client, sp, cfg.Dispatch.SuspensionGuard.Window)
	if err != nil {
		return nil, fmt.Errorf("gateway: suspension guard: %w", err)
	}
	return window, nil
}

// finish is what both modes add last: the suspension guard's policy over
// the mode's 429 window, and the limiter's readiness check.
func (b *backend) finish(cfg config.Config, window dispatch.ThrottleWindow) error {
	g := cfg.Dispatch.SuspensionGuard
	var err error
	if b.guard, err = dispatch.NewGuard(window, dispatch.GuardConfig{Threshold: g.Threshold, Share: g.Share}); err != nil {
		return fmt.Errorf("gateway: suspension guard: %w", err)
	}
	lim := b.limiter
	b.checks = append(b.checks, httpapi.ReadyCheck{Name: "limiter", Check: func(ctx context.Context) error { _, err := lim.State(ctx); return err }})
	return nil
}

// closeOnError closes what a failed constructor opened.
func (b *backend) closeOnError(err *error, log *slog.Logger) {
	if *err != nil {
		_ = b.stops.run(log)
	}
}

// producerNames are the configured producers' names.
func producerNames(cfg config.Config) []string {
	out := make([]string, 0, len(cfg.Producers))
	for _, p := range cfg.Producers {
		out = append(out, p.Name)
	}
	return out
}
