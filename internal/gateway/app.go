// Package gateway is the smsgw application: the wiring of
// queue, limiter, dispatcher and provider, the HTTP API with its admission
// control, and the one place errors become HTTP answers.
package gateway

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"smsgw/internal/config"
	"smsgw/internal/dispatch"
	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/provider/httpprov"
	"smsgw/internal/provider/twilio"
	"smsgw/internal/provider/vonage"
	"smsgw/internal/queue"
	"smsgw/internal/queue/embedded"
	"smsgw/internal/queue/redisq"
)

// Options are what a caller of New may supply besides the configuration.
type Options struct {
	Logger *slog.Logger // nil: discard
	// Registerer receives every metric of the App; nil: a new registry per
	// App, with the Go and process collectors, served at /metrics. When
	// set it must also be a prometheus.Gatherer (a *prometheus.Registry),
	// or Gatherer must be set.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// Provider replaces the provider built from cfg.Provider (tests, demo).
	Provider provider.Provider
	// Now is the wall clock for message times and estimates; nil: time.Now.
	Now func() time.Time
	// Dashboard, when set, is mounted at /dashboard/.
	Dashboard http.Handler
	// Owner names this replica in queue leases; default host-pid-random.
	Owner string
	// DrainDelay is how long Stop keeps serving after /readyz turned
	// unready, so load balancers notice before the listener closes.
	DrainDelay time.Duration
}

// App is one gateway replica.
type App struct {
	cfg    config.Config
	log    *slog.Logger
	srv    *server
	http   *http.Server
	disp   *dispatch.Dispatcher
	queue  queue.Queue
	redis  redis.UniversalClient // nil in embedded mode
	prov   provider.Provider
	drain  time.Duration
	closed []func() error

	mu       sync.Mutex
	ln       net.Listener
	served   chan error
	cancel   context.CancelFunc
	started  bool
	stopped  bool
	stopErr  error
	stopDone chan struct{}
}

// New builds the App: Redis mode (shared queue, shared limiter with its
// local fallback, shared ingress quotas, shared suspension guard) when
// redis.addr is set, embedded mode (one node) otherwise. It does not listen
// or send until Start.
func New(ctx context.Context, cfg config.Config, opts Options) (_ *App, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	reg, gath, err := registry(opts)
	if err != nil {
		return nil, err
	}
	owner := opts.Owner
	if owner == "" {
		host, _ := os.Hostname()
		owner = host + "-" + strconv.Itoa(os.Getpid()) + "-" + rand.Text()[:6]
	}
	a := &App{cfg: cfg, log: log, drain: opts.DrainDelay, stopDone: make(chan struct{})}
	defer func() {
		if err != nil {
			a.closeAll()
		}
	}()

	metrics, err := newAPIMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	s := &server{
		cfg: cfg, log: log, now: now, metrics: metrics, gatherer: gath,
		auth: newAuthenticator(cfg), dashboard: opts.Dashboard, quiet: cfg.QuietPolicy(),
	}
	for _, p := range cfg.HTTP.TrustedProxies {
		pr, perr := netip.ParsePrefix(p)
		if perr != nil {
			return nil, fmt.Errorf("gateway: http.trusted_proxies: %w", perr)
		}
		s.trusted = append(s.trusted, pr.Masked())
	}
	lcfg := limiterConfig(cfg)
	var guard dispatch.Guard
	gcfg := dispatch.GuardConfig{Window: cfg.Dispatch.SuspensionGuard.Window,
		Threshold: cfg.Dispatch.SuspensionGuard.Threshold, Share: cfg.Dispatch.SuspensionGuard.Share}

	if cfg.Redis.Enabled() {
		a.redis = newRedisClient(cfg.Redis)
		a.closed = append(a.closed, a.redis.Close)
		rq, err := redisq.New(redisq.Config{Client: a.redis, Account: cfg.Account, Logger: log,
			Retention: cfg.Messages.Retention, IdempotencyWindow: config.IdempotencyWindow, Registerer: reg})
		if err != nil {
			return nil, fmt.Errorf("gateway: queue: %w", err)
		}
		a.queue = rq
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if _, perr := rq.CheckPersistence(pctx); perr != nil {
			log.Error("could not check whether Redis persists the queue (is it reachable?)", "err", perr)
		}
		cancel()
		rl, err := limiter.NewRedis(a.redis, cfg.Account, lcfg)
		if err != nil {
			return nil, fmt.Errorf("gateway: limiter: %w", err)
		}
		sl, err := limiter.NewShared(limiter.SharedConfig{Redis: rl, Config: lcfg, MaxSenders: cfg.Limits.MaxSenders,
			Logger: log, Registerer: reg, RedisTimeout: cfg.Redis.Timeout})
		if err != nil {
			return nil, fmt.Errorf("gateway: limiter: %w", err)
		}
		s.limiter = sl
		keys, err := limiter.NewRedisKeys(a.redis, cfg.Account)
		if err != nil {
			return nil, fmt.Errorf("gateway: ingress limiter: %w", err)
		}
		s.ingress = &ingress{primary: keys, fallback: limiter.NewLocalKeys(), log: log,
			onError: metrics.ingressFallback.Inc}
		if guard, err = dispatch.NewRedisGuard(a.redis, cfg.Account, gcfg); err != nil {
			return nil, fmt.Errorf("gateway: suspension guard: %w", err)
		}
		ak := newAPIKeys(cfg.Account)
		s.idem = &redisIdem{c: a.redis, keys: ak}
		s.pause = &operatorPause{c: a.redis, key: ak.pause(), now: now, log: log, every: pausePollEvery}
		client := a.redis
		s.checks = []readyCheck{
			{"redis", func(ctx context.Context) error { return client.Ping(ctx).Err() }},
			{"store", func(ctx context.Context) error { _, err := rq.Stats(ctx); return err }},
		}
	} else {
		eq, err := embedded.Open(embedded.Config{Path: cfg.Store.Path, Logger: log,
			Retention: cfg.Messages.Retention, IdempotencyWindow: config.IdempotencyWindow, Registerer: reg})
		if err != nil {
			return nil, fmt.Errorf("gateway: queue: %w", err)
		}
		a.queue = eq
		ll, err := limiter.NewLocal(lcfg)
		if err != nil {
			return nil, fmt.Errorf("gateway: limiter: %w", err)
		}
		s.limiter = ll
		s.ingress = &ingress{primary: limiter.NewLocalKeys(), log: log}
		if guard, err = dispatch.NewLocalGuard(gcfg); err != nil {
			return nil, fmt.Errorf("gateway: suspension guard: %w", err)
		}
		s.idem = newLocalIdem(now)
		s.pause = &operatorPause{now: now, log: log, every: pausePollEvery}
		s.checks = []readyCheck{
			{"store", func(ctx context.Context) error { _, err := eq.Stats(ctx); return err }},
		}
	}
	a.closed = append([]func() error{a.queue.Close}, a.closed...)
	if err := reg.Register(newQueueCollector(a.queue, log)); err != nil {
		return nil, fmt.Errorf("gateway: queue metrics: %w", err)
	}
	s.queue, s.enq = a.queue, a.queue
	if a.redis != nil {
		// Many concurrent POSTs share one enqueue script round trip. The
		// embedded store already shares one commit between them.
		co := newCoalescer(ctx, a.queue)
		s.enq = co
		a.closed = append([]func() error{co.close}, a.closed...)
	}
	lim := s.limiter
	s.checks = append(s.checks, readyCheck{"limiter", func(ctx context.Context) error { _, err := lim.State(ctx); return err }})

	a.prov = opts.Provider
	if a.prov == nil {
		if a.prov, err = newProvider(cfg.Provider, log); err != nil {
			return nil, err
		}
	}
	otpLatency := newLatencyWindow(otpLatencySamples)
	a.disp, err = dispatch.New(dispatch.Config{
		Queue: a.queue, Limiter: pausedLimiter{Limiter: s.limiter, p: s.pause}, Guard: guard,
		Provider: observedProvider{Provider: a.prov, now: now, otp: otpLatency}, Owner: owner,
		Workers: cfg.Dispatch.Workers, OTPWorkers: cfg.Dispatch.OTPWorkers,
		Lease: cfg.Dispatch.Lease, MaxAttempts: cfg.Dispatch.MaxAttempts,
		BackoffBase: cfg.Dispatch.BackoffBase, BackoffMax: cfg.Dispatch.BackoffMax,
		CountSegments: cfg.Provider.CountSegments, Logger: log, Registerer: reg, Now: now, Hold: s.quiet.Hold,
	})
	if err != nil {
		return nil, fmt.Errorf("gateway: dispatcher: %w", err)
	}
	s.otp, s.notifier = a.disp, a.disp
	s.eta = &etaEstimator{q: a.queue, lim: s.limiter, pause: s.pause, cfg: cfg, now: now, log: log, refresh: etaRefresh,
		quiet: s.quiet, slowdown: a.disp.Slowdown}
	mode := "embedded"
	var countersKey string
	if a.redis != nil {
		mode, countersKey = "redis", newAPIKeys(cfg.Account).counters()
	}
	started := now()
	s.live = &liveStats{replica: replica{owner: owner, mode: mode, started: started}, providerName: a.prov.Name(),
		snap: a.disp.Snapshot, otp: otpLatency, totals: newTotalsLoop(a.disp.Snapshot, a.redis, countersKey, log, started)}
	a.srv = s
	a.http = &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: min(cfg.HTTP.ReadTimeout, 5*time.Second),
		ReadTimeout:       cfg.HTTP.ReadTimeout,
		WriteTimeout:      cfg.HTTP.WriteTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("gateway ready to start", "mode", mode, "account", cfg.Account, "provider", a.prov.Name(),
		"producers", len(cfg.Producers), "target_rps", cfg.Limits.TargetRPS, "owner", owner)
	return a, nil
}

func registry(opts Options) (prometheus.Registerer, prometheus.Gatherer, error) {
	if opts.Registerer == nil {
		r := prometheus.NewRegistry()
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		return r, r, nil
	}
	g := opts.Gatherer
	if g == nil {
		var ok bool
		if g, ok = opts.Registerer.(prometheus.Gatherer); !ok {
			return nil, nil, errors.New("gateway: Options.Registerer is not a Gatherer; set Options.Gatherer too")
		}
	}
	return opts.Registerer, g, nil
}

// limiterConfig is the provider pacing of cfg.Limits.
func limiterConfig(cfg config.Config) limiter.Config {
	out := limiter.Config{Global: limiter.Rate{PerSecond: cfg.Limits.TargetRPS, Burst: cfg.Limits.Burst}}
	for name, cl := range cfg.Limits.Classes {
		if out.Classes == nil {
			out.Classes = map[string]limiter.Rate{}
		}
		b := cl.Burst
		if b == 0 {
			b = cfg.Limits.Burst
		}
		out.Classes[name] = limiter.Rate{PerSecond: cl.MaxRPS, Burst: b}
	}
	return out
}

// newRedisClient: Sentinel when master_name is set, Cluster for several
// addresses, a single node otherwise.
func newRedisClient(rc config.RedisConfig) redis.UniversalClient {
	addrs := rc.Addrs()
	var tlsCfg *tls.Config
	if rc.TLS {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	switch {
	case rc.MasterName != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: rc.MasterName, SentinelAddrs: addrs,
			Username: rc.Username, Password: rc.Password, DB: rc.DB, TLSConfig: tlsCfg,
			DialTimeout: rc.Timeout, ReadTimeout: rc.Timeout, WriteTimeout: rc.Timeout})
	case len(addrs) > 1:
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs,
			Username: rc.Username, Password: rc.Password, TLSConfig: tlsCfg,
			DialTimeout: rc.Timeout, ReadTimeout: rc.Timeout, WriteTimeout: rc.Timeout})
	}
	return redis.NewClient(&redis.Options{Addr: addrs[0],
		Username: rc.Username, Password: rc.Password, DB: rc.DB, TLSConfig: tlsCfg,
		DialTimeout: rc.Timeout, ReadTimeout: rc.Timeout, WriteTimeout: rc.Timeout})
}

func newProvider(pc config.ProviderConfig, log *slog.Logger) (provider.Provider, error) {
	var (
		p   provider.Provider
		err error
	)
	switch pc.Kind {
	case "http":
		p, err = httpprov.New(httpprov.Config{URL: pc.HTTP.URL, Token: pc.HTTP.Token, Timeout: pc.Timeout, Logger: log})
	case "twilio":
		p, err = twilio.New(twilio.Config{Settings: pc.Twilio, BaseURL: pc.HTTP.URL, Timeout: pc.Timeout, Logger: log})
	case "vonage":
		p, err = vonage.New(vonage.Config{Settings: pc.Vonage, BaseURL: pc.HTTP.URL, Timeout: pc.Timeout, Logger: log})
	default:
		err = fmt.Errorf("unknown kind %q", pc.Kind)
	}
	if err != nil {
		return nil, fmt.Errorf("gateway: provider: %w", err)
	}
	return p, nil
}

// Start listens on cfg.Listen and starts the send loop.
func (a *App) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		return errors.New("gateway: already started")
	}
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("gateway: listen %s: %w", a.cfg.Listen, err)
	}
	// Stop, not the caller's ctx, ends the background work: a cancelled
	// ctx (SIGTERM) must lead to a graceful Stop, not a crash.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if err := a.disp.Start(runCtx); err != nil {
		cancel()
		_ = ln.Close()
		return fmt.Errorf("gateway: %w", err)
	}
	a.srv.pause.start(runCtx)
	a.srv.live.totals.start(runCtx)
	a.ln, a.cancel, a.started = ln, cancel, true
	a.served = make(chan error, 1)
	go func() { a.served <- a.http.Serve(ln) }()
	a.log.Info("gateway listening", "addr", ln.Addr().String())
	return nil
}

// Addr is the address the App listens on ("" before Start).
func (a *App) Addr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ln == nil {
		return ""
	}
	return a.ln.Addr().String()
}

// Handler is the App's HTTP handler, for callers that serve it themselves.
func (a *App) Handler() http.Handler { return a.http.Handler }

// Stop shuts the App down in order: /readyz turns unready, the listener
// keeps serving for DrainDelay, in-flight HTTP requests finish, the send
// loop stops (in-flight sends finish while ctx allows), then the stores
// close. Stop may be called more than once.
func (a *App) Stop(ctx context.Context) error {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		<-a.stopDone
		return a.stopErr
	}
	a.stopped = true
	started := a.started
	a.mu.Unlock()
	defer close(a.stopDone)

	a.srv.stopping.Store(true)
	var errs []error
	if started {
		if a.drain > 0 {
			t := time.NewTimer(a.drain)
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
		if err := a.http.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
			_ = a.http.Close()
		}
		if err := <-a.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("http serve: %w", err))
		}
		if err := a.disp.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
		a.srv.pause.close()
		a.srv.live.totals.close(ctx)
		a.cancel()
	}
	a.closeAll()
	a.stopErr = errors.Join(errs...)
	a.log.Info("gateway stopped", "err", a.stopErr)
	return a.stopErr
}

func (a *App) closeAll() {
	if c, ok := a.prov.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	for _, c := range a.closed {
		if err := c(); err != nil && !errors.Is(err, queue.ErrClosed) {
			a.log.Warn("close", "err", err)
		}
	}
	a.closed = nil
}

// Run runs a gateway until ctx ends (SIGTERM), then stops it within
// dispatch.shutdown_timeout.
func Run(ctx context.Context, cfg config.Config, opts Options) error {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	log := opts.Logger
	if opts.DrainDelay == 0 {
		opts.DrainDelay = min(2*time.Second, cfg.Dispatch.ShutdownTimeout/4)
	}
	app, err := New(ctx, cfg, opts)
	if err != nil {
		return err
	}
	if err := app.Start(ctx); err != nil {
		_ = app.Stop(context.Background())
		return err
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-app.served:
		app.served <- serveErr // Stop reads it again
		serveErr = fmt.Errorf("gateway: http server ended: %w", serveErr)
	}
	log.Info("gateway stopping", "timeout", cfg.Dispatch.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Dispatch.ShutdownTimeout)
	defer cancel()
	return errors.Join(serveErr, app.Stop(sctx))
}
