package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/limiter"
	"smsgw/internal/provider/httpprov"
	"smsgw/internal/provider/sim"
	"smsgw/internal/sms"
	"smsgw/internal/tick"
)

// message is one simulated SMS.
type message struct {
	id      string
	class   sms.Class
	to      string
	arrived time.Time // when it reached the senders: OTP latency starts here
}

// pod is one simulated producer replica.
type pod struct {
	idx   int
	skew  time.Duration
	prov  *httpprov.Provider
	redis *redis.Client // nil for per-pod
	log   *slog.Logger
}

// clock is the pod's own wall clock, off by its skew.
func (p *pod) clock() time.Time { return time.Now().Add(p.skew) }

// callCounter counts round trips to Redis (a MULTI/EXEC pipeline is one).
type callCounter struct{ n *atomic.Int64 }

func (c callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// arrivals records when each send reached the provider, whatever its answer,
// to find the most sends tried in any second.
type arrivals struct {
	mu sync.Mutex
	at []time.Time
}

func (a *arrivals) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/send" {
			now := time.Now()
			a.mu.Lock()
			a.at = append(a.at, now)
			a.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

// maxIn1s returns the most arrivals in any interval (t-1s, t] and the total.
func (a *arrivals) maxIn1s() (most, total int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := 0
	for j, t := range a.at {
		for t.Sub(a.at[i]) >= time.Second {
			i++
		}
		most = max(most, j-i+1)
	}
	return most, len(a.at)
}

// provider is a fresh simulator behind a counting listener on 127.0.0.1.
type providerSim struct {
	sim  *sim.Sim
	arr  *arrivals
	srv  *http.Server
	done chan struct{}
	url  string
}

func startProvider(ctx context.Context, cfg Config, w sim.Window) (*providerSim, error) {
	s, err := sim.New(sim.Config{Limit: cfg.Contract, Window: w, Offset: cfg.Offset,
		SuspendAfter: -1, Logger: cfg.Logger.With("component", "sim")})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("bench: listen: %w", err)
	}
	p := &providerSim{sim: s, arr: &arrivals{}, done: make(chan struct{}), url: "http://" + ln.Addr().String() + "/send"}
	p.srv = &http.Server{Handler: p.arr.wrap(s.Handler()), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(ln) // ErrServerClosed on close
	}()
	return p, nil
}

func (p *providerSim) close() {
	_ = p.sim.Close() // releases hanging requests first
	_ = p.srv.Close()
	<-p.done
}

func podSkew(cfg Config, i int) time.Duration {
	if cfg.Skew <= 0 || cfg.Pods == 1 {
		return 0
	}
	return -cfg.Skew + time.Duration(int64(2*cfg.Skew)*int64(i)/int64(cfg.Pods-1))
}

// runOne is one strategy against one fresh simulator.
func runOne(ctx context.Context, cfg Config, admin *redis.Client, st Strategy, w sim.Window) (res Result, err error) {
	log := cfg.Logger.With("strategy", st, "window", w)
	prefix := randomPrefix()
	defer func() {
		if cerr := Cleanup(ctx, admin, prefix); cerr != nil {
			log.Warn("bench: redis keys left behind", "prefix", prefix, "err", cerr)
		}
	}()
	ps, err := startProvider(ctx, cfg, w)
	if err != nil {
		return Result{}, err
	}
	defer ps.close()

	var calls atomic.Int64
	pods := make([]*pod, cfg.Pods)
	defer closePods(pods)
	if err := startPods(ctx, cfg, st, ps.url, log, &calls, pods); err != nil {
		return Result{}, err
	}
	workers, err := newWorkers(cfg, st, prefix, pods)
	if err != nil {
		return Result{}, err
	}

	if err := waitPhase(ctx, cfg.StartPhase); err != nil {
		return Result{}, err
	}
	hardCtx, hardCancel := context.WithTimeout(ctx, cfg.Duration+drainGrace)
	defer hardCancel()
	runCtx, runCancel := context.WithTimeout(hardCtx, cfg.Duration)
	defer runCancel()
	log.Info("bench: run", "pods", cfg.Pods, "duration", cfg.Duration, "offset", cfg.Offset)

	tr := newTraffic(cfg, st)
	var wg sync.WaitGroup
	tr.start(runCtx, &wg)
	for _, wk := range workers {
		wg.Go(func() { wk(runCtx, hardCtx, tr) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("bench: interrupted: %w", err)
	}

	return result(cfg, st, w, ps, tr, calls.Load()), nil
}

// startPods fills pods: each with its own provider client and, except for
// per-pod limiting, its own Redis connection counted in calls.
func startPods(ctx context.Context, cfg Config, st Strategy, url string, log *slog.Logger, calls *atomic.Int64, pods []*pod) error {
	for i := range pods {
		prov, err := httpprov.New(httpprov.Config{Name: "sim", URL: url, Timeout: sendTimeout})
		if err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		p := &pod{idx: i, skew: podSkew(cfg, i), prov: prov, log: log.With("pod", i)}
		pods[i] = p
		if st == PerPod {
			continue
		}
		p.redis, err = DialRedis(ctx, cfg.RedisAddr)
		if err != nil {
			return err
		}
		p.redis.AddHook(callCounter{calls})
	}
	return nil
}

// closePods releases what startPods opened, however far it got.
func closePods(pods []*pod) {
	for _, p := range pods {
		if p == nil {
			continue
		}
		p.prov.CloseIdleConnections()
		if p.redis != nil {
			_ = p.redis.Close() // the run is over; nothing waits on this client
		}
	}
}

// result reads the run's figures from the simulator and the traffic.
func result(cfg Config, st Strategy, w sim.Window, ps *providerSim, tr *traffic, calls int64) Result {
	stats := ps.sim.Stats()
	tried, attempts := ps.arr.maxIn1s()
	res := Result{Strategy: st, Window: w,
		Rejected429: stats.Rejected429, MaxIn1s: stats.MaxMessagesInAny1s, MaxAttemptsIn1s: tried,
		Attempts: attempts, Accepted: stats.Accepted, Rate: float64(stats.Accepted) / cfg.Duration.Seconds(), Target: float64(cfg.Contract),
		Duplicates: stats.Duplicates, OTPOffered: int(tr.otpOffered.Load()), OTPDropped: int(tr.otpDropped.Load()), OTPSent: stats.PerClass[sms.ClassOTP.String()],
		RedisCalls: calls, WouldSuspend: stats.Rejected429 > SuspendAfter}
	if st == GCRA {
		res.Target = cfg.Target
	}
	if l, ok := stats.Latency[sms.ClassOTP.String()]; ok {
		res.OTPP50MS, res.OTPP99MS = l.P50, l.P99
	}
	if stats.Accepted > 0 {
		res.RedisPerMsg = float64(res.RedisCalls) / float64(stats.Accepted)
	}
	res.Why, res.Notes = explain(cfg, res)
	return res
}

// waitPhase sleeps until the wall clock is phase past a second.
func waitPhase(ctx context.Context, phase time.Duration) error {
	if phase < 0 {
		return nil
	}
	now := time.Now()
	at := now.Truncate(time.Second).Add(phase)
	if at.Before(now) {
		at = at.Add(time.Second)
	}
	if !tick.Sleep(ctx, at.Sub(now)) {
		return fmt.Errorf("bench: interrupted: %w", ctx.Err())
	}
	return nil
}

// traffic is the producers' side: a campaign FIFO kept full and an OTP
// trickle, into one FIFO (old strategies) or two lanes (gcra).
type traffic struct {
	cfg        Config
	bulk       chan message
	otp        chan message // == bulk when the strategy has no priority
	otpOffered atomic.Int64
	otpDropped atomic.Int64 // given up after 429s
	seq        atomic.Int64
}

func newTraffic(cfg Config, st Strategy) *traffic {
	t := &traffic{cfg: cfg, bulk: make(chan message, cfg.QueueDepth)}
	t.otp = t.bulk
	if st == GCRA {
		t.otp = make(chan message, 10_000)
	}
	return t
}

func (t *traffic) newMessage(c sms.Class) message {
	now := time.Now()
	n := t.seq.Add(1)
	return message{id: sms.NewID(now), class: c, arrived: now, to: "+8190" + fmt.Sprintf("%08d", n%100_000_000)}
}

func (t *traffic) start(ctx context.Context, wg *sync.WaitGroup) {
	wg.Go(func() { // the campaign: as much as the FIFO takes
		for {
			select {
			case t.bulk <- t.newMessage(sms.ClassMarketing):
			case <-ctx.Done():
				return
			}
		}
	})
	wg.Go(func() { // the OTP trickle; each waits for its place in the queue
		// At (k+½)·interval, so the last one does not coincide with the
		// end of the run.
		interval := time.Duration(float64(time.Second) / t.cfg.OTPRate)
		start := time.Now()
		var enq sync.WaitGroup
		defer enq.Wait()
		for k := 0; ; k++ {
			if !tick.Sleep(ctx, time.Until(start.Add(interval/2+time.Duration(k)*interval))) {
				return
			}
			m := t.newMessage(sms.ClassOTP)
			t.otpOffered.Add(1)
			enq.Go(func() {
				select {
				case t.otp <- m:
				case <-ctx.Done():
				}
			})
		}
	})
}

func (m message) body() string {
	if m.class == sms.ClassOTP {
		return "Your login code is " + strconv.Itoa(int(m.arrived.UnixNano()%1_000_000))
	}
	return "You won! Open the app to claim your prize."
}

// worker is one sending loop of a pod: it takes messages until runCtx ends;
// sends already decided finish under hardCtx.
type worker func(runCtx, hardCtx context.Context, tr *traffic)

func newWorkers(cfg Config, st Strategy, prefix string, pods []*pod) ([]worker, error) {
	var out []worker
	for _, p := range pods {
		switch st {
		case PerPod:
			out = append(out, oldWorker(p, &localWindow{limit: cfg.Contract / 2, clock: p.clock}))
		case RedisFixedWindow:
			out = append(out, oldWorker(p, &getIncrWindow{redisWindow{limit: cfg.Contract, prefix: prefix, c: p.redis, clock: p.clock}}))
		case AtomicIncr:
			out = append(out, oldWorker(p, &atomicWindow{redisWindow{limit: cfg.Contract, prefix: prefix, c: p.redis, clock: p.clock}}))
		case GCRA:
			lim, err := limiter.NewRedis(p.redis, prefix, limiter.Config{
				Global:  limiter.Rate{PerSecond: cfg.Target, Burst: cfg.Burst},
				Classes: map[string]limiter.Rate{sms.ClassMarketing.String(): {PerSecond: cfg.Marketing, Burst: cfg.Burst}},
			})
			if err != nil {
				return nil, fmt.Errorf("bench: %w", err)
			}
			// Two lanes per pod: OTP never waits behind marketing.
			out = append(out, gcraWorker(p, lim, func(tr *traffic) <-chan message { return tr.otp }, otpMaxWait),
				gcraWorker(p, lim, func(tr *traffic) <-chan message { return tr.bulk }, bulkMaxWait))
		default:
			return nil, errors.New("bench: unknown strategy " + string(st))
		}
	}
	return out, nil
}
