// Package demo is `smsgw demo`: a gateway on the embedded store in front of
// the provider simulator, both in this process, fed with a marketing
// campaign, a transactional trickle and OTPs through the fast path, with a
// one-line summary of what the provider received every few seconds.
package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/dashboard"
	"smsgw/internal/gateway"
	"smsgw/internal/provider/sim"
)

// Keys the demo prints so the API can be tried by hand. They only ever
// exist in this process.
const (
	keyLogin  = "demo-login-key-0123456789"
	keyNotify = "demo-notify-key-0123456789"
	keyAdmin  = "demo-admin-key-0123456789"
	// receiptSecret signs the simulator's delivery receipts.
	receiptSecret = "demo-receipt-secret-0123"
	// The producers' sender ids (producers[].senders): a producer
	// that names none may send as any sender id, which start-up warns of.
	senderLogin  = "DemoAuth"
	senderNotify = "DemoShop"
)

// Options shape a demo run.
type Options struct {
	Listen   string        // the gateway's address; keep it on loopback, the keys are printed
	Campaign int           // marketing messages posted at start
	OTPEvery time.Duration // interval of the OTP trickle (POST /v1/otp); 0: none
	TxnEvery time.Duration // interval of transactional messages; 0: none
	Limit    int           // the simulated provider's contract, messages/s
	Every    time.Duration // interval of the summary line
	Verbose  bool          // gateway logs at info level (else warn) on stderr
}

// Run runs the demo until ctx ends, printing to stdout; logs go to stderr.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	log := demoLogger(stderr, o.Verbose)

	// The provider simulator enforces the contract the gateway must keep.
	s, simURL, err := startSim(o.Limit, log)
	if err != nil {
		return err
	}
	defer func() {
		if err := s.Close(); err != nil {
			log.Warn("demo: close simulator", "err", err)
		}
	}()

	dir, err := os.MkdirTemp("", "smsgw-demo-")
	if err != nil {
		return err
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("demo: remove the store", "dir", dir, "err", err)
		}
	}()
	cfg, err := demoConfig(o.Listen, filepath.Join(dir, "data"), simURL+"/send")
	if err != nil {
		return err
	}
	app, err := startGateway(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer stopGateway(ctx, app, log)
	base := "http://" + hostForURL(app.Addr())
	if err := banner(stdout, o, cfg, base, simURL); err != nil {
		return err
	}
	// The simulator reports delivery like a provider: most delivered, some
	// undelivered, a few before the send's answer, each posted twice.
	if err := s.EnableReceipts(sim.Receipts{URLs: []string{base + "/v1/receipts/http"}, Secret: receiptSecret,
		Delay: 2 * time.Second, UndeliveredShare: 0.05, Duplicates: 1, EarlyShare: 0.05}); err != nil {
		return err
	}

	t := &traffic{base: base, client: &http.Client{Timeout: 10 * time.Second}}
	if err := t.campaign(ctx, o.Campaign); err != nil && ctx.Err() == nil {
		return fmt.Errorf("post campaign: %w", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { t.loop(ctx, o.TxnEvery, t.transactional) })
	wg.Go(func() { t.loop(ctx, o.OTPEvery, t.otp) })
	return t.report(ctx, stdout, s, o.Every)
}

// demoLogger logs at warn, or at info with Verbose.
func demoLogger(w io.Writer, verbose bool) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	// The text handler writes a duration as "30s" (the JSON one would
	// write nanoseconds: smsgw serve's logger rewrites them).
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// startSim starts the provider simulator on a free loopback port.
func startSim(limit int, log *slog.Logger) (*sim.Sim, string, error) {
	s, err := sim.New(sim.Config{Limit: limit, Window: sim.WindowSliding, Logger: log.With("component", "sim")})
	if err != nil {
		return nil, "", err
	}
	simURL, err := s.Start("127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("start simulator: %w", err)
	}
	return s, simURL, nil
}

// startGateway builds and starts the demo gateway.
func startGateway(ctx context.Context, cfg config.Config, log *slog.Logger) (*gateway.App, error) {
	app, err := gateway.New(ctx, cfg, gateway.Options{Logger: log, Dashboard: dashboard.Handler(), DrainDelay: time.Millisecond})
	if err != nil {
		return nil, err
	}
	if err := app.Start(ctx); err != nil {
		_ = app.Stop(context.Background()) // the start error is the one to report
		return nil, err
	}
	return app, nil
}

// stopGateway stops the gateway, giving it 5 s to drain after ctx ended.
func stopGateway(ctx context.Context, app *gateway.App, log *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := app.Stop(sctx); err != nil {
		log.Warn("demo: stop gateway", "err", err)
	}
}

// config is the demo gateway's configuration: embedded store, the
// simulator as provider, a login and a notification producer, the admin API.
func demoConfig(listen, storePath, sendURL string) (config.Config, error) {
	yaml := fmt.Sprintf(`listen: %q
store: {path: %q}
provider: {kind: http, url: %q, timeout: 2s, receipt_secret: %q}
producers:
  - {name: login, key: %q, classes: [otp], rate: 50, burst: 100, senders: [%s]}
  - {name: notify-worker, key: %q, classes: [transactional, marketing], rate: 5000, burst: 5000, senders: [%s]}
admin: {key: %q}
log: {level: warn, format: text}
`, listen, storePath, sendURL, receiptSecret, keyLogin, senderLogin, keyNotify, senderNotify, keyAdmin)
	return config.Load([]byte(yaml), nil)
}

// banner prints the addresses, keys and a curl line to try.
func banner(w io.Writer, o Options, cfg config.Config, base, simURL string) error {
	_, err := fmt.Fprintf(w, `smsgw demo
  gateway    %s   (embedded store, local limiter at %g/s, marketing capped at %g/s)
  dashboard  %s/dashboard/   admin key: %s
  provider   simulator at %s, contract %d/s (sliding window)
  producers  login (otp, sender %s): %s
             notify-worker (transactional, marketing, sender %s): %s

Try:  curl -s -X POST %s/v1/otp -H 'Authorization: Bearer %s' \
        -H 'Content-Type: application/json' -d '{"to":"+819012345678","body":"Your code is 123456"}'

Posting a %d-message marketing campaign, transactional every %s, OTP every %s. Ctrl-C to stop.

`, base, cfg.Limits.TargetRPS, cfg.Limits.Classes["marketing"].MaxRPS, base, keyAdmin, simURL, o.Limit,
		senderLogin, keyLogin, senderNotify, keyNotify, base, keyLogin, o.Campaign, o.TxnEvery, o.OTPEvery)
	return err
}

// hostForURL turns a listen address into one a browser or curl can reach.
func hostForURL(addr string) string {
	if strings.HasPrefix(addr, "[::]:") || strings.HasPrefix(addr, "0.0.0.0:") {
		return "localhost" + addr[strings.LastIndex(addr, ":"):]
	}
	if strings.HasPrefix(addr, ":") {
		return "localhost" + addr
	}
	return addr
}
