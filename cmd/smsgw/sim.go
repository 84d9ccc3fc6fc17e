package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
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
	receiptURLs := fs.String("receipt-url", "", "post a delivery receipt of every accepted message to these gateway endpoints (comma-separated …/v1/receipts/http); empty: none")
	receiptSecret := fs.String("receipt-secret", "", "the gateway's provider.receipt_secret, to sign receipts (or SMSGW_PROVIDER_RECEIPT_SECRET)")
	receiptDelay := fs.Duration("receipt-delay", time.Second, "how long after the accept a receipt is posted")
	undelivered := fs.Float64("undelivered-share", 0.05, "share of receipts saying undelivered")
	duplicates := fs.Int("receipt-duplicates", 0, "extra posts of each receipt (a vendor's retries)")
	early := fs.Float64("early-receipts", 0, "share of receipts posted before the send's answer")
	verbose := fs.Bool("v", false, "log every send (debug)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "smsgw sim: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *offset < 0 || *offset >= 1 {
		fmt.Fprintf(stderr, "smsgw sim: --offset %v: want seconds in [0, 1)\n", *offset)
		return 2
	}
	if *retryAfter <= 0 {
		fmt.Fprintf(stderr, "smsgw sim: --retry-after %v: want > 0 seconds\n", *retryAfter)
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
		Logger:   logger,
		Receipts: receiptsConfig(*receiptURLs, *receiptSecret, *receiptDelay, *undelivered, *duplicates, *early),
	})
	if err != nil {
		fmt.Fprintf(stderr, "smsgw sim: %v\n", err)
		return 2
	}
	url, err := s.Start(*listen)
	if err != nil {
		fmt.Fprintf(stderr, "smsgw sim: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "sim listening on %s\n", url)
	logger.Info("sim started", "url", url, "send", url+"/send", "limit", *limit, "window", *window,
		"offset", *offset, "suspend_after", *suspendAfter, "suspend_window", *suspendWindow, "suspend_for", *suspendFor)

	<-ctx.Done()
	if err := s.Close(); err != nil {
		logger.Error("sim: close", "err", err)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s.Stats()); err != nil {
		fmt.Fprintf(stderr, "smsgw sim: write stats: %v\n", err)
		return 1
	}
	return 0
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
