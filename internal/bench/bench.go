// Package bench runs the comparison of docs/design.md section 8: what the
// provider sees when many producer pods share one account, under the old
// limiters and under ours. Every figure is counted at the provider simulator
// (in-process, on 127.0.0.1), never by the senders.
//
// One run is one strategy against one fresh simulator: Pods goroutines
// ("pods", each with its own Redis connection, HTTP client and, for the
// clock-based baselines, its own clock skew) send a marketing flood and an OTP
// trickle for Duration, then the simulator's statistics are read.
//
// Traffic model. The marketing flood is a producer that keeps a bounded FIFO
// of QueueDepth messages full; OTPs arrive at OTPRate. The old strategies
// have one FIFO for both (an OTP waits behind QueueDepth campaign messages);
// gcra has an OTP lane of its own. The flood starts StartPhase past a
// wall-clock second, the moment a campaign is triggered: a fixed-window
// limiter keyed by skewed pod clocks then spends two windows at once.
package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/provider/sim"
)

// Strategy is one way of pacing the senders.
type Strategy string

// The old strategies of docs/design.md section 1, and ours.
const (
	// PerPod: each pod limits itself to Contract/2 per second (its own clock)
	// "because prod has 2 pods".
	PerPod Strategy = "per-pod"
	// RedisFixedWindow: GET sms:{second} then INCR and EXPIRE (three round
	// trips, a read-then-write race), the second read on the pod's clock.
	RedisFixedWindow Strategy = "redis-fixed-window"
	// AtomicIncr: INCR and EXPIRE in one MULTI, allowed while the count is
	// at most Contract: atomic, but still a fixed window on the pod's clock.
	AtomicIncr Strategy = "atomic-incr"
	// GCRA: ours, limiter.Redis shared by every pod (Redis TIME, one script,
	// reservations), OTP in its own lane, marketing capped, 429 → shared pause.
	GCRA Strategy = "gcra"
)

// Strategies lists every strategy in table order.
var Strategies = []Strategy{PerPod, RedisFixedWindow, AtomicIncr, GCRA}

// ParseStrategy checks a strategy name.
func ParseStrategy(s string) (Strategy, error) {
	for _, st := range Strategies {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("bench: unknown strategy %q (want one of %s)", s, strings.Join(strategyNames(), ", "))
}

func strategyNames() []string {
	out := make([]string, len(Strategies))
	for i, s := range Strategies {
		out[i] = string(s)
	}
	return out
}

// Defaults.
const (
	DefaultPods       = 16
	DefaultDuration   = 5 * time.Second
	DefaultRedisAddr  = "127.0.0.1:6379"
	DefaultContract   = 100
	DefaultTarget     = 90
	DefaultBurst      = 5
	DefaultMarketing  = 70
	DefaultOTPRate    = 5
	DefaultSkew       = 300 * time.Millisecond
	DefaultQueueDepth = 100
	DefaultStartPhase = 900 * time.Millisecond

	// SuspendAfter is the provider's suspension threshold (429s within
	// 10 minutes). The simulator never suspends during a bench, so the 429
	// count is the whole story; a run above it is flagged.
	SuspendAfter = 300

	oldRetries  = 4                      // old: a 429 is retried in place this many times
	oldSpin     = time.Millisecond       // old: a denial is retried after this
	sendTimeout = 2 * time.Second        // per HTTP attempt
	drainGrace  = 3 * time.Second        // after Duration: in-flight sends finish
	otpMaxWait  = time.Second            // gcra: how far ahead an OTP reserves
	bulkMaxWait = 5 * time.Millisecond   // gcra: how far ahead marketing reserves
	errBackoff  = 10 * time.Millisecond  // gcra: after a Redis error
	settle      = 100 * time.Millisecond // gcra: keep a pause from racing the next run
)

// Config is one bench invocation.
type Config struct {
	Pods       int           // producer pods; default DefaultPods
	Duration   time.Duration // sending time per run; default DefaultDuration
	Windows    []sim.Window  // provider window shapes; default sliding and fixed
	Offset     time.Duration // fixed windows start this far past each second, [0, 1s); negative: random
	RedisAddr  string        // loopback only; default DefaultRedisAddr
	Strategies []Strategy    // default Strategies
	Contract   int           // provider limit per second; default DefaultContract
	Target     float64       // gcra global rate; default DefaultTarget
	Burst      int           // gcra burst; default DefaultBurst
	Marketing  float64       // gcra marketing cap; default DefaultMarketing
	OTPRate    float64       // OTPs per second; default DefaultOTPRate
	Skew       time.Duration // pod clocks are spread evenly over ±Skew; default DefaultSkew; negative: none
	QueueDepth int           // the campaign FIFO's depth; default DefaultQueueDepth
	StartPhase time.Duration // the flood starts this far past a wall-clock second, [0, 1s); negative: at once
	Logger     *slog.Logger  // default: discard
}

func (c *Config) setDefaults() error {
	c.Pods = cmp.Or(c.Pods, DefaultPods)
	c.Duration = cmp.Or(c.Duration, DefaultDuration)
	if len(c.Windows) == 0 {
		c.Windows = []sim.Window{sim.WindowSliding, sim.WindowFixed}
	}
	c.RedisAddr = cmp.Or(c.RedisAddr, DefaultRedisAddr)
	if len(c.Strategies) == 0 {
		c.Strategies = Strategies
	}
	c.Contract = cmp.Or(c.Contract, DefaultContract)
	c.Target = cmp.Or(c.Target, DefaultTarget)
	c.Burst = cmp.Or(c.Burst, DefaultBurst)
	c.Marketing = cmp.Or(c.Marketing, DefaultMarketing)
	c.OTPRate = cmp.Or(c.OTPRate, DefaultOTPRate)
	c.Skew = cmp.Or(c.Skew, DefaultSkew)
	c.QueueDepth = cmp.Or(c.QueueDepth, DefaultQueueDepth)
	c.StartPhase = cmp.Or(c.StartPhase, DefaultStartPhase)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Offset < 0 {
		c.Offset = randomOffset()
	}
	switch {
	case c.Pods < 1 || c.Pods > 1000:
		return fmt.Errorf("bench: pods %d: want 1..1000", c.Pods)
	case c.Duration < 100*time.Millisecond || c.Duration > 10*time.Minute:
		return fmt.Errorf("bench: duration %v: want 100ms..10m", c.Duration)
	case c.Offset >= time.Second:
		return fmt.Errorf("bench: offset %v: want [0, 1s)", c.Offset)
	case c.StartPhase >= time.Second:
		return fmt.Errorf("bench: start phase %v: want [0, 1s)", c.StartPhase)
	case c.Contract < 1 || c.Target <= 0 || c.Burst < 1 || c.Marketing <= 0 || c.OTPRate <= 0 || c.QueueDepth < 1:
		return errors.New("bench: contract, target, burst, marketing, otp rate and queue depth must be positive")
	}
	for _, w := range c.Windows {
		if w != sim.WindowSliding && w != sim.WindowFixed {
			return fmt.Errorf("bench: window %q: want sliding or fixed", w)
		}
	}
	for _, s := range c.Strategies {
		if _, err := ParseStrategy(string(s)); err != nil {
			return err
		}
	}
	return CheckLoopback(c.RedisAddr)
}

// CheckLoopback refuses a Redis that is not on this machine: the bench
// floods what it talks to.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("bench: redis address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("bench: redis address %q: the bench only talks to a loopback Redis", addr)
}

func randomOffset() time.Duration {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return time.Duration(int(b[0])<<8|int(b[1])) % 1000 * time.Millisecond
}

func randomPrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "bench-" + hex.EncodeToString(b[:])
}

// Report is one invocation's results.
type Report struct {
	Pods       int      `json:"pods"`
	DurationS  float64  `json:"duration_s"`
	OffsetMS   int64    `json:"offset_ms"`
	SkewMS     int64    `json:"skew_ms"`
	StartPhMS  int64    `json:"start_phase_ms"` // -1: at once
	Contract   int      `json:"contract_rps"`
	OTPRate    float64  `json:"otp_rps"`
	QueueDepth int      `json:"queue_depth"`
	Results    []Result `json:"results"`
}

// Result is what the provider saw during one run.
type Result struct {
	Strategy Strategy   `json:"strategy"`
	Window   sim.Window `json:"window"`

	Rejected429     int     `json:"rejected_429"`    // 429 answers, retries included
	MaxIn1s         int     `json:"max_in_any_1s"`   // most accepted in any 1 s interval
	MaxAttemptsIn1s int     `json:"max_tried_in_1s"` // most sends (any answer) in any 1 s interval
	Attempts        int     `json:"attempts"`        // sends that reached the provider
	Accepted        int     `json:"accepted"`        // messages accepted
	Rate            float64 `json:"rate_rps"`        // accepted per second of sending time
	Target          float64 `json:"target_rps"`      // what the strategy aims at
	Duplicates      int     `json:"duplicates"`      // accepts of a reference already accepted
	OTPOffered      int     `json:"otp_offered"`     // OTPs that arrived at the senders
	OTPSent         int     `json:"otp_sent"`        // OTPs the provider accepted
	OTPDropped      int     `json:"otp_dropped"`     // OTPs given up after five 429s (old strategies)
	OTPP50MS        float64 `json:"otp_p50_ms"`      // OTP arrival → provider, ms (sent OTPs)
	OTPP99MS        float64 `json:"otp_p99_ms"`      //
	RedisCalls      int64   `json:"redis_calls"`     // round trips to Redis by the pods
	RedisPerMsg     float64 `json:"redis_calls_per_msg"`
	WouldSuspend    bool    `json:"would_suspend"` // more than SuspendAfter 429s
	Why             string  `json:"why"`           // why the strategy overshoots, or does not
	Notes           string  `json:"notes"`         // the figures of this run that show it
}

// Run runs every strategy under every window, one after another.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.setDefaults(); err != nil {
		return Report{}, err
	}
	rep := Report{Pods: cfg.Pods, DurationS: cfg.Duration.Seconds(), OffsetMS: cfg.Offset.Milliseconds(),
		SkewMS: max(cfg.Skew, 0).Milliseconds(), StartPhMS: cfg.StartPhase.Milliseconds(),
		Contract: cfg.Contract, OTPRate: cfg.OTPRate, QueueDepth: cfg.QueueDepth}
	admin, err := DialRedis(ctx, cfg.RedisAddr)
	if err != nil {
		return rep, err
	}
	defer closeAdmin(admin, cfg.Logger)
	if cfg.StartPhase < 0 {
		rep.StartPhMS = -1
	}
	for _, st := range cfg.Strategies {
		for _, w := range cfg.Windows {
			res, err := runOne(ctx, cfg, admin, st, w)
			if err != nil {
				return rep, err
			}
			rep.Results = append(rep.Results, res)
		}
	}
	return rep, nil
}

// RunOne runs one strategy against one fresh simulator.
func RunOne(ctx context.Context, cfg Config, st Strategy, w sim.Window) (Result, error) {
	cfg.Strategies, cfg.Windows = []Strategy{st}, []sim.Window{w}
	if err := cfg.setDefaults(); err != nil {
		return Result{}, err
	}
	admin, err := DialRedis(ctx, cfg.RedisAddr)
	if err != nil {
		return Result{}, err
	}
	defer closeAdmin(admin, cfg.Logger)
	return runOne(ctx, cfg, admin, st, w)
}

// DialRedis connects to the Redis at addr and checks that it answers.
func DialRedis(ctx context.Context, addr string) (*redis.Client, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2})
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("bench: redis at %s: %w", addr, err)
	}
	return c, nil
}

// closeAdmin closes the admin connection at the end of a run; the figures are
// already taken, so a failure is only worth a warning.
func closeAdmin(c *redis.Client, log *slog.Logger) {
	if err := c.Close(); err != nil {
		log.Warn("bench: close redis", "err", err)
	}
}

// Cleanup deletes every key of the run's prefix.
func Cleanup(ctx context.Context, c *redis.Client, prefix string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, "*"+prefix+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("bench: clean up redis keys: %w", err)
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := c.Del(ctx, keys[:n]...).Err(); err != nil {
			return fmt.Errorf("bench: clean up redis keys: %w", err)
		}
		keys = keys[n:]
	}
	return nil
}
