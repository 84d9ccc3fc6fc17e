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

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/dispatch"
	"smsgw/internal/httpapi"
	"smsgw/internal/httpapi/auththrottle"
	"smsgw/internal/httpapi/inboundreply"
	"smsgw/internal/limiter"
	"smsgw/internal/opsview"
	"smsgw/internal/provider"
	"smsgw/internal/provider/httpprov"
	"smsgw/internal/provider/twilio"
	"smsgw/internal/provider/vonage"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
	"smsgw/internal/tick"
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
	// RedisHook, when set, is added to the Redis client (benchmarks count
	// round trips with it).
	RedisHook redis.Hook
}

// App is one gateway replica.
type App struct {
	cfg   config.Config
	log   *slog.Logger
	srv   *httpapi.Server
	admit *admission.Pipeline // the server's Admit
	desk  *opsview.Desk       // the server's Ops
	calls *httpapi.Callbacks  // the server's Hooks.Callbacks, a loop
	http  *http.Server
	admin *http.Server // admin.listen's, nil without it
	disp  *dispatch.Dispatcher
	b     *backend
	prov  provider.Provider
	drain time.Duration

	mu       sync.Mutex
	ln       net.Listener
	adminLn  net.Listener
	served   chan error
	adminEnd chan error
	cancel   context.CancelFunc
	started  bool
	stopped  bool
	stopErr  error
	stopDone chan struct{}
}

// New builds the App: Redis mode (shared queue, shared limiter and ingress
// quotas with their local fallbacks, shared state) when redis.addr is set,
// embedded mode (one node) otherwise. It neither contacts Redis nor starts
// anything: Start does (ctx is not used).
func New(_ context.Context, cfg config.Config, opts Options) (_ *App, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d, gath, err := newDeps(opts)
	if err != nil {
		return nil, err
	}
	// The first request would otherwise build the phone-number metadata
	// (hundreds of ms on a small machine).
	sms.Warm()
	newBackend := newEmbeddedBackend
	if cfg.Redis.Enabled() {
		newBackend = newRedisBackend
	}
	b, err := newBackend(cfg, d)
	if err != nil {
		return nil, err
	}
	a := &App{cfg: cfg, log: d.log, b: b, drain: opts.DrainDelay, stopDone: make(chan struct{})}
	defer func() {
		if err != nil {
			_ = a.closeAll() // logged step by step
		}
	}()
	if err := d.reg.Register(opsview.NewQueueCollector(b.queue, d.log)); err != nil {
		return nil, fmt.Errorf("gateway: queue metrics: %w", err)
	}
	if lq, ok := b.queue.(queue.LaneReader); ok { // per sender lane, labelled by limits.senders
		if err := d.reg.Register(opsview.NewSenderLaneCollector(lq, cfg.SenderRates(), d.log)); err != nil {
			return nil, fmt.Errorf("gateway: sender lane metrics: %w", err)
		}
	}
	if bq, ok := b.queue.(queue.Budgets); ok { // producers[].budget, against its limits
		if err := d.reg.Register(opsview.NewBudgetCollector(bq, cfg, d.now, d.log)); err != nil {
			return nil, fmt.Errorf("gateway: budget metrics: %w", err)
		}
	}
	if err := opsview.RegisterConfigMetrics(d.reg, cfg, b.pause); err != nil {
		return nil, fmt.Errorf("gateway: config metrics: %w", err)
	}
	if a.prov = opts.Provider; a.prov == nil {
		if a.prov, err = newProvider(cfg.Provider, d.log); err != nil {
			return nil, err
		}
	}
	// Protection before the send loop: the loop reports the opt-outs the
	// provider answers to the suppression list (optOuts).
	protect, err := admission.NewProtector(cfg.Protection, b.numbers, b.suppress, d.reg, d.log, d.now)
	if err != nil {
		return nil, err
	}
	if b.outage != nil {
		protect.Outage = b.outage
	}
	optOuts, err := admission.NewOptOuts(cfg.Protection.OptOut, protect, d.reg, d.log, d.now, opsview.ReceiptAdapters)
	if err != nil {
		return nil, fmt.Errorf("gateway: opt-out metrics: %w", err)
	}
	owner, otpLatency := ownerName(opts.Owner), opsview.NewLatencyWindow(opsview.OTPLatencySamples)
	lanes := senderLanes(cfg, b.limiter, d.now)
	prov := opsview.ObservedProvider{Provider: lanes.Observe(a.prov), Now: d.now, OTP: otpLatency}
	dcfg := dispatcherConfig(cfg, d, b, prov, owner)
	dcfg.OptOuts = optOuts
	replies, err := newReplies(cfg, d, b, protect, a.prov)
	if err != nil {
		return nil, err
	}
	if replies != nil {
		dcfg.Replies = replies
	}
	if a.disp, err = dispatch.New(dcfg); err != nil {
		return nil, fmt.Errorf("gateway: dispatcher: %w", err)
	}
	disp := a.disp
	d.quiet.Set(func() bool { return disp.Idle(idleQuiet) })
	started := d.now()
	totals := opsview.NewTotalsLoop(a.disp.Snapshot, b.counters, b.scope, d.log, started)
	totals.T.Quiet, totals.T.QuietEvery = d.quiet, opsview.TotalsIdleEvery
	live := &opsview.LiveStats{Replica: opsview.Replica{Owner: owner, Mode: b.mode, Started: started}, ProviderName: a.prov.Name(),
		Snap: a.disp.Snapshot, OTP: otpLatency, Totals: totals, Lanes: lanes}
	if a.calls, err = newCallbacks(cfg, d, b, owner); err != nil {
		return nil, err
	}
	if a.srv, a.admit, err = newServer(cfg, d, gath, b, a.disp, opts.Dashboard); err != nil {
		return nil, err
	}
	a.admit.Protect, a.srv.Hooks.OptOuts, a.srv.Hooks.Callbacks = protect, optOuts, a.calls
	if a.admit.Pools, err = admission.NewPools(cfg, d.reg, d.log); err != nil {
		return nil, err
	}
	if pools := a.admit.Pools; pools != nil {
		pools.Sticky, pools.Outage, pools.Paused = b.sticky, protect.Outage, a.disp.SenderPauseLeft
		pools.NumberKey = func(ctx context.Context) ([]byte, error) { return protect.NumberKey(ctx, false) }
	}
	if replies != nil { // a nil *Replies in the interface would not read as none
		a.srv.Hooks.Replies = replies
	}
	live.Totals.Refused = protect.Refused
	a.desk = &opsview.Desk{OperatorPause: b.pause, Cfg: cfg, Now: d.now, Metrics: d.metrics, Limiter: b.limiter, Live: live,
		Queue: b.queue, Outbox: a.calls.Outbox, Protect: protect}
	if a.desk.Hist, err = opsview.NewHistoryView(b.history, b.scope, b.queue, a.disp.Snapshot, d.metrics.Accepted, d.quiet.Idle, d.log); err != nil {
		return nil, err
	}
	a.srv.Ops = a.desk
	if rp, ok := a.prov.(provider.ReceiptParser); ok {
		a.srv.Hooks.Receipts, a.srv.Hooks.Said = rp, a.disp.ProviderSaid
	}
	if ip, ok := a.prov.(provider.InboundParser); ok {
		a.srv.Hooks.Inbound = ip
	}
	if cfg.Admin.Listen == "" {
		a.http = newHTTPServer(cfg, a.srv.Routes(), d.log)
	} else {
		a.http = newHTTPServer(cfg, a.srv.Router(true, false), d.log)
		a.admin = newHTTPServer(cfg, a.srv.Router(false, true), d.log)
	}
	d.log.Info("gateway ready to start", "mode", b.mode, "account", cfg.Account, "provider", a.prov.Name(),
		"producers", len(cfg.Producers), "target_rps", cfg.Limits.TargetRPS, "segments", cfg.SegmentsSummary(), "owner", owner)
	if r := cfg.Rotations(); len(r) > 0 {
		d.log.Info("credential rotation under way: the old credential is still accepted; remove each key once nothing uses it", "keys", r)
	}
	if open := cfg.OpenSenders(); len(open) > 0 {
		d.log.Warn("producers without senders may send as any sender id; list their senders (producers[].senders)", "producers", open)
	}
	return a, nil
}

// dispatcherConfig is the send loop of cfg over the backend: its limiter
// obeys the operator pause, and its takes read the suppression list
// (OTP too with protection.suppress_otp, as at accept).
func dispatcherConfig(cfg config.Config, d deps, b *backend, prov provider.Provider, owner string) dispatch.Config {
	listed := b.listed
	listed.OTP = cfg.Protection.SuppressOTP
	return dispatch.Config{
		Queue: b.queue, Limiter: admission.PausedLimiter{Limiter: b.limiter, P: b.pause}, Guard: b.guard,
		Held: b.pause, Shelf: b.shelf,
		Provider: prov, Owner: owner,
		Workers: cfg.Dispatch.Workers, OTPWorkers: cfg.Dispatch.OTPWorkers,
		Lease: cfg.Dispatch.Lease, MaxAttempts: cfg.Dispatch.MaxAttempts, PoisonAfter: cfg.Dispatch.PoisonAfter,
		BackoffBase: cfg.Dispatch.BackoffBase, BackoffMax: cfg.Dispatch.BackoffMax,
		CountSegments: cfg.Provider.CountSegments, Pacing: limiterConfig(cfg), Logger: d.log, Registerer: d.reg, Now: d.now,
		Hold:        cfg.QuietPolicy().Hold,
		LateSlot:    dispatch.LateSlotFor(cfg.Provider.ContractRPS, cfg.Limits.TargetRPS, cfg.Limits.Burst),
		Suppression: listed,
	}
}

// newDeps resolves the Options' defaults and the API metrics.
func newDeps(opts Options) (deps, prometheus.Gatherer, error) {
	d := deps{log: opts.Logger, now: opts.Now, quiet: &tick.QuietGate{}, hook: opts.RedisHook}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if d.now == nil {
		d.now = time.Now
	}
	reg, gath, err := registry(opts)
	if err != nil {
		return deps{}, nil, err
	}
	d.reg = reg
	if d.metrics, err = opsview.NewAPIMetrics(reg, httpapi.KindLabels()); err != nil {
		return deps{}, nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	return d, gath, nil
}

// ownerName names this replica in queue leases: owner, or host-pid-random.
func ownerName(owner string) string {
	if owner != "" {
		return owner
	}
	host, _ := os.Hostname()
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + rand.Text()[:6]
}

// The concrete collaborators fit the interfaces the HTTP layer holds them
// by.
var (
	_ httpapi.Admission      = (*admission.Pipeline)(nil)
	_ httpapi.MessageStore   = queue.Queue(nil)
	_ httpapi.Dispatcher     = (*dispatch.Dispatcher)(nil)
	_ httpapi.Operations     = (*opsview.Desk)(nil)
	_ httpapi.OptOutList     = (*admission.OptOuts)(nil)
	_ httpapi.CallbackOutbox = (*httpapi.Callbacks)(nil)
	_ inboundreply.Replies   = (*admission.Replies)(nil)
)

// newServer is what the handlers need, and the admission pipeline it holds
// (its protection, and the server's Ops and hooks, are set by New).
func newServer(cfg config.Config, d deps, gath prometheus.Gatherer, b *backend, disp *dispatch.Dispatcher,
	dashboard http.Handler) (*httpapi.Server, *admission.Pipeline, error) {
	s := &httpapi.Server{
		Cfg: cfg, Log: d.log, Now: d.now, Metrics: d.metrics, Dispatch: disp,
		Store:  httpapi.Stores{Queue: b.queue, Idem: b.idem},
		Served: httpapi.Served{Gatherer: gath, Dashboard: dashboard, Checks: b.checks},
		Edge: httpapi.Edge{Auth: httpapi.NewAuthenticator(cfg, d.metrics.PreviousKeys), AuthThrottle: auththrottle.New(time.Now),
			BodyGate: httpapi.NewBodyGate(cfg.HTTP.BodyBytesInFlight, cfg.HTTP.BodyBytesInFlightPerProducer, cfg.HTTP.MaxBodyBytes)},
	}
	s.OTPRecords.Init()
	quiet := cfg.QuietPolicy()
	admit := &admission.Pipeline{Quiet: quiet, Queue: b.queue, Ingress: b.ingress, Enq: b.enq, Script: b.script,
		TakesHere: disp.TakesHere, TargetRPS: cfg.Limits.TargetRPS, Log: d.log, CountSegments: cfg.Provider.CountSegments,
		ETA: &admission.ETAEstimator{Q: b.queue, Lim: b.limiter, Pause: b.pause, Cfg: cfg, Now: d.now, Log: d.log, Refresh: admission.ETARefresh,
			Quiet: quiet, Slowdown: disp.Slowdown}}
	if bq, ok := b.queue.(queue.Budgets); ok { // an OTP's units (admission.StepBudget)
		admit.Budgets = bq
	}
	s.Admit = admit
	if err := wireUsage(s, admit, cfg, d, b); err != nil {
		return nil, nil, err
	}
	for _, p := range cfg.HTTP.TrustedProxies {
		pr, err := netip.ParsePrefix(p)
		if err != nil {
			return nil, nil, fmt.Errorf("gateway: http.trusted_proxies: %w", err)
		}
		s.Edge.Trusted = append(s.Edge.Trusted, pr.Masked())
	}
	return s, admit, nil
}

func newHTTPServer(cfg config.Config, h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(cfg.HTTP.ReadTimeout, 5*time.Second),
		ReadTimeout:       cfg.HTTP.ReadTimeout,
		WriteTimeout:      cfg.HTTP.WriteTimeout,
		IdleTimeout:       cfg.HTTP.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
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
	for name, sl := range cfg.Limits.Senders {
		if out.Senders == nil {
			out.Senders = map[string]limiter.Rate{}
		}
		out.Senders[name] = limiter.Rate{PerSecond: sl.MaxRPS, Burst: config.SenderBurst(sl)}
	}
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

// senderLanes keeps the sender lanes of the stats answer: the configured
// senders' limits, their pauses read from lim.
func senderLanes(cfg config.Config, lim limiter.Limiter, now func() time.Time) *opsview.SenderLanes {
	limits := make(map[string]float64, len(cfg.Limits.Senders))
	for name, sl := range cfg.Limits.Senders {
		limits[name] = sl.MaxRPS
	}
	pauses, _ := lim.(opsview.SenderPauseReader)
	return opsview.NewSenderLanes(limits, pauses, now)
}

// newRedisClient: Sentinel when master_name is set, Cluster for several
// addresses, a single node otherwise.
//
// A context's deadline bounds each command (ContextTimeoutEnabled;
// go-redis ignores it otherwise and waits up to redis.timeout per try,
// retried): an OTP's deadline_ms, a record's or an answer's write timeout
// then mean what they say. A connection is dialed once per try of a
// command (DialerRetries 1; go-redis's five dials 100 ms apart added
// about 0.4 s to every Redis step of a request when an outage began,
// before the breakers and fallbacks took over); a command is still
// retried on another connection (go-redis's MaxRetries), which the
// scripts are written for (a retried enqueue stores its id once).
func newRedisClient(rc config.RedisConfig) redis.UniversalClient {
	addrs := rc.Addrs()
	tlsCfg, err := rc.TLSConfig()
	if err != nil {
		// Validate refused it already; a file changed since is refused
		// at the first dial, not sent in clear.
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12, GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return nil, err
		}}
	}
	switch {
	case rc.MasterName != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: rc.MasterName, SentinelAddrs: addrs,
			SentinelUsername: rc.SentinelUsername, SentinelPassword: rc.SentinelPassword,
			Username: rc.Username, Password: rc.Password, DB: rc.DB, TLSConfig: tlsCfg,
			DialTimeout: rc.Timeout, ReadTimeout: rc.Timeout, WriteTimeout: rc.Timeout,
			ContextTimeoutEnabled: true, DialerRetries: 1})
	case len(addrs) > 1:
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs,
			Username: rc.Username, Password: rc.Password, TLSConfig: tlsCfg,
			DialTimeout: rc.Timeout, ReadTimeout: rc.Timeout, WriteTimeout: rc.Timeout,
			ContextTimeoutEnabled: true, DialerRetries: 1})
		cc.AddHook(&topologyReloader{reload: cc.ReloadState})
		return cc
	}
	return redis.NewClient(&redis.Options{Addr: addrs[0],
		Username: rc.Username, Password: rc.Password, DB: rc.DB, TLSConfig: tlsCfg,
		DialTimeout: rc.Timeout, ReadTimeout: rc.Timeout, WriteTimeout: rc.Timeout,
		ContextTimeoutEnabled: true, DialerRetries: 1})
}

func newProvider(pc config.ProviderConfig, log *slog.Logger) (provider.Provider, error) {
	var (
		p   provider.Provider
		err error
	)
	switch pc.Kind {
	case "http":
		p, err = httpprov.New(httpprov.Config{URL: pc.HTTP.URL, Token: pc.HTTP.Token, Timeout: pc.Timeout, Logger: log,
			ReceiptSecret: pc.ReceiptSecret, PreviousReceiptSecret: pc.PreviousReceiptSecret})
	case "twilio":
		p, err = twilio.New(twilio.Config{Settings: pc.Twilio, BaseURL: pc.HTTP.URL, Timeout: pc.Timeout, Logger: log,
			StatusCallback: pc.ReceiptURL, InboundURL: pc.InboundURL})
	case "vonage":
		p, err = vonage.New(vonage.Config{Settings: pc.Vonage, BaseURL: pc.HTTP.URL, Timeout: pc.Timeout, Logger: log,
			Callback: pc.ReceiptURL})
	default:
		err = fmt.Errorf("unknown kind %q", pc.Kind)
	}
	if err != nil {
		return nil, fmt.Errorf("gateway: provider: %w", err)
	}
	return p, nil
}

// Start asks Redis whether it persists the queue (persistenceCheck), then
// listens on cfg.Listen and starts the send loop and the background loops.
func (a *App) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		return errors.New("gateway: already started")
	}
	if a.b.persist != nil {
		a.b.persist.StartUp(ctx)
	}
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("gateway: listen %s: %w", a.cfg.Listen, err)
	}
	var adminLn net.Listener
	if a.admin != nil {
		if adminLn, err = new(net.ListenConfig).Listen(ctx, "tcp", a.cfg.Admin.Listen); err != nil {
			_ = ln.Close()
			return fmt.Errorf("gateway: listen %s (admin.listen): %w", a.cfg.Admin.Listen, err)
		}
	}
	// Stop, not the caller's ctx, ends the background work: a cancelled
	// ctx (SIGTERM) must lead to a graceful Stop, not a crash.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if err := a.disp.Start(runCtx); err != nil {
		cancel()
		_ = ln.Close()
		if adminLn != nil {
			_ = adminLn.Close()
		}
		return fmt.Errorf("gateway: %w", err)
	}
	for _, l := range a.loops() {
		l.Start(runCtx)
	}
	ln = newLimitListener(ln, a.cfg.HTTP.MaxConnections)
	if adminLn != nil {
		adminLn = newLimitListener(adminLn, a.cfg.HTTP.MaxConnections)
	}
	a.ln, a.cancel, a.started = ln, cancel, true
	a.served = make(chan error, 1)
	go func() { a.served <- a.http.Serve(ln) }()
	a.log.Info("gateway listening", "addr", ln.Addr().String())
	if adminLn != nil {
		a.adminLn, a.adminEnd = adminLn, make(chan error, 1)
		go func() { a.adminEnd <- a.admin.Serve(adminLn) }()
		a.log.Info("operator endpoints listening", "addr", adminLn.Addr().String())
	}
	return nil
}

// loops are the backend's loops and the stats totals, in start order.
func (a *App) loops() []loop {
	return append(a.b.loops[:len(a.b.loops):len(a.b.loops)], a.desk.Live.Totals, a.desk.Hist.Rec, a.calls)
}

// Addr is the address the App listens on ("" before Start).
func (a *App) Addr() string { return a.addrOf(func() net.Listener { return a.ln }) }

// AdminAddr is the address of the admin.listen listener ("" without it,
// or before Start).
func (a *App) AdminAddr() string { return a.addrOf(func() net.Listener { return a.adminLn }) }

func (a *App) addrOf(ln func() net.Listener) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if l := ln(); l != nil {
		return l.Addr().String()
	}
	return ""
}

// Handler is the App's HTTP handler, for callers that serve it themselves.
func (a *App) Handler() http.Handler { return a.http.Handler }

// Stop shuts the App down in order: /readyz turns unready, the listener
// keeps serving for DrainDelay, in-flight HTTP requests finish, the send
// loop stops (in-flight sends finish while ctx allows), the background
// loops stop, then the stop stack closes the stores and the Redis client.
// Stop may be called more than once.
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

	a.srv.Stopping.Store(true)
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
		if a.adminEnd != nil {
			if err := a.admin.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("admin http shutdown: %w", err))
				_ = a.admin.Close()
			}
			if err := <-a.adminEnd; err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs = append(errs, fmt.Errorf("admin http serve: %w", err))
			}
		}
		// The fast path's OTP records still being written after their
		// answers need the store: they end (or time out) before it closes.
		a.srv.OTPRecords.Close(ctx)
		if err := a.disp.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
		// Last started first: the totals' final flush still has Redis, the
		// coalescer has no caller left.
		loops := a.loops()
		for i := len(loops) - 1; i >= 0; i-- {
			loops[i].Stop()
		}
		a.cancel()
	}
	if err := a.closeAll(); err != nil {
		errs = append(errs, err)
	}
	a.stopErr = errors.Join(errs...)
	a.log.Info("gateway stopped", "err", a.stopErr)
	return a.stopErr
}

// closeAll closes what New opened, last opened first.
func (a *App) closeAll() error {
	if c, ok := a.prov.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	return a.b.stops.run(a.log)
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
