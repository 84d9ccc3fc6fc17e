package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"smsgw/internal/provider/sim"
)

// simCommand runs the provider simulator until ctx ends. The first line on
// stdout is "sim listening on http://HOST:PORT", so a test that starts it
// with --listen 127.0.0.1:0 can find it; on exit the final stats go to
// stdout as JSON.
func simCommand(fs *flag.FlagSet) runner {
	f := simFlagsOn(fs)
	return func(ctx context.Context, stdout, stderr io.Writer) int {
		level := slog.LevelInfo
		if f.verbose {
			level = slog.LevelDebug
		}
		logger := newTextLogger(stderr, level)
		cfg, err := f.config(logger)
		if err != nil {
			complain(stderr, "smsgw sim: %v\n", err)
			return 2
		}
		s, err := sim.New(cfg)
		if err != nil {
			complain(stderr, "smsgw sim: %v\n", err)
			return 2
		}
		url, err := s.Start(f.listen)
		if err != nil {
			complain(stderr, "smsgw sim: %v\n", err)
			return 1
		}
		if _, err := fmt.Fprintf(stdout, "sim listening on %s\n", url); err != nil {
			// Whoever started us reads the address from stdout: without it
			// nobody can reach the simulator.
			complain(stderr, "smsgw sim: write address: %v\n", err)
			closeSim(s, logger)
			return 1
		}
		logger.Info("sim started", "url", url, "send", url+"/send", "limit", f.limit, "window", f.window,
			"offset", f.offset, "senders", len(cfg.Senders), "suspend_after", f.suspendAfter, "suspend_window", f.suspendWindow, "suspend_for", f.suspendFor)

		<-ctx.Done()
		closeSim(s, logger)
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(s.Stats()); err != nil {
			complain(stderr, "smsgw sim: write stats: %v\n", err)
			return 1
		}
		return 0
	}
}

// closeSim stops the simulator; a failure is logged, the stats still print.
func closeSim(s *sim.Sim, logger *slog.Logger) {
	if err := s.Close(); err != nil {
		logger.Error("sim: close", "err", err)
	}
}

// simFlags are the flags of smsgw sim.
type simFlags struct {
	listen, window, senders                    string
	limit, suspendAfter, failStatus            int
	offset, retryAfter                         float64
	failRate, timeoutRate, lostReplyRate       float64
	suspendWindow, suspendFor, latency, jitter time.Duration
	noIdem, ignoreSegments, verbose            bool

	// Receipts posted back to the gateway.
	receiptURLs, receiptSecret string
	receiptDelay               time.Duration
	undelivered, early         float64
	duplicates                 int
}

// simFlagsOn defines the flags on fs.
func simFlagsOn(fs *flag.FlagSet) *simFlags {
	f := &simFlags{}
	fs.StringVar(&f.listen, "listen", "127.0.0.1:9100", "address to listen on (port 0: any free port)")
	fs.IntVar(&f.limit, "limit", 100, "units (messages or segments) accepted per second; 0: unlimited")
	fs.StringVar(&f.senders, "senders", "", "per-sender limits, units per second in a sliding window: FROM=N,... (e.g. Mkt1=3,Mkt2=40); over one, a 429 whose body says \"scope\": \"sender\"")
	fs.StringVar(&f.window, "window", "sliding", "how a second is measured: sliding (any trailing 1 s) or fixed (1 s windows starting --offset past each second)")
	fs.Float64Var(&f.offset, "offset", 0.37, "fixed windows: start of each window past the second, in seconds [0, 1)")
	fs.Float64Var(&f.retryAfter, "retry-after", 1, "Retry-After of a 429, in seconds (rounded up)")
	fs.IntVar(&f.suspendAfter, "suspend-after", sim.DefaultSuspendAfter, "suspend the account after more than this many 429s in --suspend-window; negative: never")
	fs.DurationVar(&f.suspendWindow, "suspend-window", sim.DefaultSuspendWindow, "rolling window in which 429s are counted")
	fs.DurationVar(&f.suspendFor, "suspend-for", sim.DefaultSuspendFor, "how long a suspension lasts (every send answers 403)")
	fs.BoolVar(&f.noIdem, "no-idempotency", false, "ignore Idempotency-Key: deliver a retried send again (a provider without idempotency)")
	fs.BoolVar(&f.ignoreSegments, "ignore-segments", false, "count every message as one unit even when it says it has several segments")
	fs.DurationVar(&f.latency, "latency", 0, "latency added to every send")
	fs.DurationVar(&f.jitter, "latency-jitter", 0, "random extra latency in [0, jitter)")
	fs.Float64Var(&f.failRate, "fail-rate", 0, "probability of answering --fail-status instead of accepting")
	fs.IntVar(&f.failStatus, "fail-status", sim.DefaultFailStatus, "the 5xx of an injected failure")
	fs.Float64Var(&f.timeoutRate, "timeout-rate", 0, "probability of never answering (until the client gives up)")
	fs.Float64Var(&f.lostReplyRate, "lost-reply-rate", 0, "probability of accepting a send and then never answering")
	fs.StringVar(&f.receiptURLs, "receipt-url", "", "post a delivery receipt of every accepted message to these gateway endpoints (comma-separated …/v1/receipts/http); empty: none")
	fs.StringVar(&f.receiptSecret, "receipt-secret", "", "the gateway's provider.receipt_secret, to sign receipts (or SMSGW_PROVIDER_RECEIPT_SECRET)")
	fs.DurationVar(&f.receiptDelay, "receipt-delay", time.Second, "how long after the accept a receipt is posted")
	fs.Float64Var(&f.undelivered, "undelivered-share", 0.05, "share of receipts saying undelivered")
	fs.IntVar(&f.duplicates, "receipt-duplicates", 0, "extra posts of each receipt (a vendor's retries)")
	fs.Float64Var(&f.early, "early-receipts", 0, "share of receipts posted before the send's answer")
	fs.BoolVar(&f.verbose, "v", false, "log every send (debug)")
	return f
}

// config checks the flags sim.New does not and builds the simulator's
// configuration; an error names the flag.
func (f *simFlags) config(logger *slog.Logger) (sim.Config, error) {
	if f.offset < 0 || f.offset >= 1 {
		return sim.Config{}, fmt.Errorf("--offset %v: want seconds in [0, 1)", f.offset)
	}
	if f.retryAfter <= 0 {
		return sim.Config{}, fmt.Errorf("--retry-after %v: want > 0 seconds", f.retryAfter)
	}
	senders, err := parseSenders(f.senders)
	if err != nil {
		return sim.Config{}, err
	}
	return sim.Config{
		Limit:          f.limit,
		Senders:        senders,
		Window:         sim.Window(f.window),
		Offset:         time.Duration(f.offset * float64(time.Second)),
		RetryAfter:     time.Duration(f.retryAfter * float64(time.Second)),
		SuspendAfter:   f.suspendAfter,
		SuspendWindow:  f.suspendWindow,
		SuspendFor:     f.suspendFor,
		IgnoreSegments: f.ignoreSegments,
		NoIdempotency:  f.noIdem,
		Faults: sim.Faults{Latency: sim.Duration(f.latency), LatencyJitter: sim.Duration(f.jitter),
			FailRate: f.failRate, FailStatus: f.failStatus, TimeoutRate: f.timeoutRate, LostReplyRate: f.lostReplyRate},
		Logger:   logger,
		Receipts: receiptsConfig(f.receiptURLs, f.receiptSecret, f.receiptDelay, f.undelivered, f.duplicates, f.early),
	}, nil
}

// parseSenders reads --senders: FROM=N pairs, comma-separated. Its errors
// name the flag and the entry's position, not the sender (a long code is a
// phone number).
func parseSenders(v string) (map[string]int, error) {
	if v == "" {
		return nil, nil
	}
	out := map[string]int{}
	for i, pair := range strings.Split(v, ",") {
		from, n, ok := strings.Cut(strings.TrimSpace(pair), "=")
		limit, err := strconv.Atoi(n)
		switch {
		case !ok || from == "" || err != nil:
			return nil, fmt.Errorf("--senders: entry %d: want FROM=N", i+1)
		case limit < 1:
			return nil, fmt.Errorf("--senders: entry %d: limit %d: want >= 1", i+1, limit)
		}
		if _, dup := out[from]; dup {
			return nil, fmt.Errorf("--senders: entry %d: a sender given twice", i+1)
		}
		out[from] = limit
	}
	return out, nil
}

// receiptsConfig is the simulator's receipts from its flags; the secret
// may come from the gateway's own environment variable instead of the
// command line (where other users of the machine could read it).
func receiptsConfig(urls, secret string, delay time.Duration, undelivered float64, duplicates int, early float64) sim.Receipts {
	if urls == "" {
		return sim.Receipts{}
	}
	if secret == "" {
		secret = os.Getenv("SMSGW_PROVIDER_RECEIPT_SECRET")
	}
	return sim.Receipts{URLs: strings.Split(urls, ","), Secret: secret, Delay: delay,
		UndeliveredShare: undelivered, Duplicates: duplicates, EarlyShare: early}
}
