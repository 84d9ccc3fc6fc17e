package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"smsgw/internal/provider/sim"
)

func init() {
	register(command{name: "sim", usage: "run the provider simulator (--limit 100 --window sliding|fixed --offset 0.37)", run: runSim})
}

// runSim runs the provider simulator until ctx ends. The first line on
// stdout is "sim listening on http://HOST:PORT", so a test that starts it
// with --listen 127.0.0.1:0 can find it; on exit the final stats go to
// stdout as JSON.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:9100", "address to listen on (port 0: any free port)")
	limit := fs.Int("limit", 100, "units (messages or segments) accepted per second; 0: unlimited")
	window := fs.String("window", "sliding", "how a second is measured: sliding (any trailing 1 s) or fixed (1 s windows starting --offset past each second)")
	offset := fs.Float64("offset", 0.37, "fixed windows: start of each window past the second, in seconds [0, 1)")
	retryAfter := fs.Float64("retry-after", 1, "Retry-After of a 429, in seconds (rounded up)")
	suspendAfter := fs.Int("suspend-after", sim.DefaultSuspendAfter, "suspend the account after more than this many 429s in --suspend-window; negative: never")
	suspendWindow := fs.Duration("suspend-window", sim.DefaultSuspendWindow, "rolling window in which 429s are counted")
	suspendFor := fs.Duration("suspend-for", sim.DefaultSuspendFor, "how long a suspension lasts (every send answers 403)")
	noIdem := fs.Bool("no-idempotency", false, "ignore Idempotency-Key: deliver a retried send again (a provider without idempotency)")
	ignoreSegments := fs.Bool("ignore-segments", false, "count every message as one unit even when it says it has several segments")
	latency := fs.Duration("latency", 0, "latency added to every send")
	jitter := fs.Duration("latency-jitter", 0, "random extra latency in [0, jitter)")
	failRate := fs.Float64("fail-rate", 0, "probability of answering --fail-status instead of accepting")
	failStatus := fs.Int("fail-status", sim.DefaultFailStatus, "the 5xx of an injected failure")
	timeoutRate := fs.Float64("timeout-rate", 0, "probability of never answering (until the client gives up)")
	lostReplyRate := fs.Float64("lost-reply-rate", 0, "probability of accepting a send and then never answering")
	verbose := fs.Bool("v", false, "log every send (debug)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		complain(stderr, "smsgw sim: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *offset < 0 || *offset >= 1 {
		complain(stderr, "smsgw sim: --offset %v: want seconds in [0, 1)\n", *offset)
		return 2
	}
	if *retryAfter <= 0 {
		complain(stderr, "smsgw sim: --retry-after %v: want > 0 seconds\n", *retryAfter)
		return 2
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	s, err := sim.New(sim.Config{
		Limit:          *limit,
		Window:         sim.Window(*window),
		Offset:         time.Duration(*offset * float64(time.Second)),
		RetryAfter:     time.Duration(*retryAfter * float64(time.Second)),
		SuspendAfter:   *suspendAfter,
		SuspendWindow:  *suspendWindow,
		SuspendFor:     *suspendFor,
		IgnoreSegments: *ignoreSegments,
		NoIdempotency:  *noIdem,
		Faults: sim.Faults{Latency: sim.Duration(*latency), LatencyJitter: sim.Duration(*jitter),
			FailRate: *failRate, FailStatus: *failStatus, TimeoutRate: *timeoutRate, LostReplyRate: *lostReplyRate},
		Logger: logger,
	})
	if err != nil {
		complain(stderr, "smsgw sim: %v\n", err)
		return 2
	}
	url, err := s.Start(*listen)
	if err != nil {
		complain(stderr, "smsgw sim: %v\n", err)
		return 1
	}
	if _, err := fmt.Fprintf(stdout, "sim listening on %s\n", url); err != nil {
		// Whoever started us reads the address from stdout: without it
		// nobody can reach the simulator.
		complain(stderr, "smsgw sim: write address: %v\n", err)
		if err := s.Close(); err != nil {
			logger.Error("sim: close", "err", err)
		}
		return 1
	}
	logger.Info("sim started", "url", url, "send", url+"/send", "limit", *limit, "window", *window,
		"offset", *offset, "suspend_after", *suspendAfter, "suspend_window", *suspendWindow, "suspend_for", *suspendFor)

	<-ctx.Done()
	if err := s.Close(); err != nil {
		logger.Error("sim: close", "err", err)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s.Stats()); err != nil {
		complain(stderr, "smsgw sim: write stats: %v\n", err)
		return 1
	}
	return 0
}
