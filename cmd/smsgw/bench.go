package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"smsgw/internal/bench"
	"smsgw/internal/bench/senderlanes"
	"smsgw/internal/provider/sim"
)

// benchCommand runs the benchmark of docs/design.md section 8 and prints its table
// (or JSON with --json). It exits non-zero only when it cannot run (bad
// flags, no Redis), never because of the figures.
func benchCommand(fs *flag.FlagSet) runner {
	f := benchFlagsOn(fs)
	return func(ctx context.Context, stdout, stderr io.Writer) int {
		switch *f.scenario {
		case scenarioLimiters:
		case scenarioSenderLanes:
			return senderLanesBench(ctx, f, stdout, stderr)
		default:
			complain(stderr, "smsgw bench: --scenario %q: want %s or %s\n", *f.scenario, scenarioLimiters, scenarioSenderLanes)
			return 2
		}
		cfg, err := f.config()
		if err != nil {
			complain(stderr, "smsgw bench: %v\n", err)
			return 2
		}
		level := slog.LevelWarn
		if *f.verbose {
			level = slog.LevelInfo
		}
		cfg.Logger = newTextLogger(stderr, level)

		rep, err := bench.Run(ctx, cfg)
		return printReport(stdout, stderr, rep, err, *f.jsonOut, bench.WriteTable)
	}
}

// printReport prints a bench's report as a table, or as JSON with
// asJSON, and returns the exit code: 1 when the bench failed (err) or the
// report could not be written.
func printReport[R any](stdout, stderr io.Writer, rep R, err error, asJSON bool, table func(io.Writer, R) error) int {
	if err != nil {
		complain(stderr, "smsgw bench: %v\n", err)
		return 1
	}
	if asJSON {
		err = bench.WriteJSON(stdout, rep)
	} else {
		err = table(stdout, rep)
	}
	if err != nil {
		complain(stderr, "smsgw bench: write: %v\n", err)
		return 1
	}
	return 0
}

// The scenarios of smsgw bench.
const (
	scenarioLimiters    = "limiters"     // the old limiters against ours (internal/bench)
	scenarioSenderLanes = "sender-lanes" // account-only against sender-aware pacing (internal/bench/senderlanes)
)

// senderLanesBench runs the sender lanes scenario; of the flags it reads
// --redis, --otp-rate, --json and -v.
func senderLanesBench(ctx context.Context, f benchFlags, stdout, stderr io.Writer) int {
	cfg := senderlanes.Config{RedisAddr: *f.redisAddr, OTPRate: *f.otpRate}
	if *f.verbose {
		cfg.Logger = newTextLogger(stderr, slog.LevelInfo)
		cfg.GatewayLogger = newTextLogger(stderr, slog.LevelWarn)
	}
	rep, err := senderlanes.Run(ctx, cfg)
	return printReport(stdout, stderr, rep, err, *f.jsonOut, senderlanes.WriteTable)
}

// benchFlags are the flags of smsgw bench.
type benchFlags struct {
	scenario                    *string
	pods                        *int
	duration, skew              *time.Duration
	window, redisAddr, strategy *string
	offset, otpRate, phase      *float64
	jsonOut, verbose            *bool
}

// benchFlagsOn defines the flags on fs.
func benchFlagsOn(fs *flag.FlagSet) benchFlags {
	return benchFlags{
		scenario:  fs.String("scenario", scenarioLimiters, "limiters: the old limiters against ours; sender-lanes: account-only against sender-aware pacing, 2 replicas on Redis (reads --redis, --otp-rate, --json, -v)"),
		pods:      fs.Int("pods", bench.DefaultPods, "simulated producer pods"),
		duration:  fs.Duration("duration", bench.DefaultDuration, "sending time of each run"),
		window:    fs.String("window", "both", "provider window shape: sliding, fixed or both"),
		offset:    fs.Float64("offset", -1, "fixed windows: start of each window past the second, in seconds [0, 1); negative: random"),
		redisAddr: fs.String("redis", bench.DefaultRedisAddr, "Redis address (loopback only); keys get a random prefix and are deleted afterwards"),
		strategy:  fs.String("strategies", "", "comma-separated strategies (default all): per-pod, redis-fixed-window, atomic-incr, gcra"),
		skew:      fs.Duration("skew", bench.DefaultSkew, "pod clocks are spread evenly over ±skew (old strategies)"),
		otpRate:   fs.Float64("otp-rate", bench.DefaultOTPRate, "OTPs per second"),
		phase:     fs.Float64("start-phase", bench.DefaultStartPhase.Seconds(), "the flood starts this far past a wall-clock second, in seconds [0, 1); negative: at once"),
		jsonOut:   fs.Bool("json", false, "print machine-readable JSON instead of the table"),
		verbose:   fs.Bool("v", false, "log progress to stderr"),
	}
}

// config checks the flags and turns them into the benchmark's
// configuration (without its logger); an error names the flag.
func (f benchFlags) config() (bench.Config, error) {
	if *f.pods < 1 {
		return bench.Config{}, fmt.Errorf("--pods %d: want at least 1", *f.pods)
	}
	if *f.phase >= 1 {
		return bench.Config{}, fmt.Errorf("--start-phase %v: want seconds in [0, 1), or negative for at once", *f.phase)
	}
	if *f.offset >= 1 {
		return bench.Config{}, fmt.Errorf("--offset %v: want seconds in [0, 1), or negative for random", *f.offset)
	}
	cfg := bench.Config{Pods: *f.pods, Duration: *f.duration, RedisAddr: *f.redisAddr, OTPRate: *f.otpRate, Skew: *f.skew}
	cfg.StartPhase = time.Duration(*f.phase * float64(time.Second))
	switch {
	case *f.phase < 0:
		cfg.StartPhase = -1 // at once
	case cfg.StartPhase == 0:
		cfg.StartPhase = 1 // on the second (0 would mean the default)
	}
	if *f.skew == 0 {
		cfg.Skew = -1 // explicitly none
	}
	switch *f.window {
	case "both":
		cfg.Windows = []sim.Window{sim.WindowSliding, sim.WindowFixed}
	case string(sim.WindowSliding), string(sim.WindowFixed):
		cfg.Windows = []sim.Window{sim.Window(*f.window)}
	default:
		return bench.Config{}, fmt.Errorf("--window %q: want sliding, fixed or both", *f.window)
	}
	cfg.Offset = -1
	if *f.offset >= 0 {
		cfg.Offset = time.Duration(*f.offset * float64(time.Second))
	}
	if *f.strategy != "" {
		for name := range strings.SplitSeq(*f.strategy, ",") {
			st, err := bench.ParseStrategy(strings.TrimSpace(name))
			if err != nil {
				return bench.Config{}, fmt.Errorf("--strategies: %w", err)
			}
			cfg.Strategies = append(cfg.Strategies, st)
		}
	}
	return cfg, nil
}
