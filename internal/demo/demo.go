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
	logLevel := slog.LevelWarn
	if o.Verbose {
		logLevel = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel}))

	// The provider simulator enforces the contract the gateway must keep.
	s, err := sim.New(sim.Config{Limit: o.Limit, Window: sim.WindowSliding, Logger: log.With("component", "sim")})
	if err != nil {
		return err
	}
	simURL, err := s.Start("127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("start simulator: %w", err)
	}
	defer s.Close()

	dir, err := os.MkdirTemp("", "smsgw-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg, err := demoConfig(o.Listen, filepath.Join(dir, "data"), simURL+"/send")
	if err != nil {
		return err
	}
	app, err := gateway.New(ctx, cfg, gateway.Options{Logger: log, Dashboard: dashboard.Handler(), DrainDelay: time.Millisecond})
	if err != nil {
		return err
	}
	if err := app.Start(ctx); err != nil {
		_ = app.Stop(context.Background())
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = app.Stop(sctx)
	}()
	base := "http://" + hostForURL(app.Addr())
	// The simulator reports delivery like a provider: most delivered, some
	// undelivered, a few before the send's answer, each posted twice.
	if err := s.EnableReceipts(sim.Receipts{URLs: []string{base + "/v1/receipts/http"}, Secret: receiptSecret,
		Delay: 2 * time.Second, UndeliveredShare: 0.05, Duplicates: 1, EarlyShare: 0.05}); err != nil {
		return err
	}
	banner(stdout, o, cfg, base, simURL)

	t := &traffic{base: base, client: &http.Client{Timeout: 10 * time.Second}}
	if err := t.campaign(ctx, o.Campaign); err != nil && ctx.Err() == nil {
		return fmt.Errorf("post campaign: %w", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { t.loop(ctx, o.TxnEvery, t.transactional) })
	wg.Go(func() { t.loop(ctx, o.OTPEvery, t.otp) })

	start := time.Now()
	tick := time.NewTicker(o.Every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			t.summary(ctx, stdout, s, time.Since(start))
			fmt.Fprintln(stdout, "stopping")
			return nil
		case <-tick.C:
			t.summary(ctx, stdout, s, time.Since(start))
		}
	}
}

// config is the demo gateway's configuration: embedded store, the
// simulator as provider, a login and a notification producer, the admin API.
func demoConfig(listen, storePath, sendURL string) (config.Config, error) {
	yaml := fmt.Sprintf(`listen: %q
store: {path: %q}
provider: {kind: http, url: %q, timeout: 2s, receipt_secret: %q}
producers:
  - {name: login, key: %q, classes: [otp], rate: 50, burst: 100}
  - {name: notify-worker, key: %q, classes: [transactional, marketing], rate: 5000, burst: 5000}
admin: {key: %q}
log: {level: warn, format: text}
`, listen, storePath, sendURL, receiptSecret, keyLogin, keyNotify, keyAdmin)
	return config.Load([]byte(yaml), nil)
}

func banner(w io.Writer, o Options, cfg config.Config, base, simURL string) {
	fmt.Fprintf(w, `smsgw demo
  gateway    %s   (embedded store, local limiter at %g/s, marketing capped at %g/s)
  dashboard  %s/dashboard/   admin key: %s
  provider   simulator at %s, contract %d/s (sliding window)
  producers  login (otp): %s
             notify-worker (transactional, marketing): %s

Try:  curl -s -X POST %s/v1/otp -H 'Authorization: Bearer %s' \
        -H 'Content-Type: application/json' -d '{"to":"+819012345678","body":"Your code is 123456"}'

Posting a %d-message marketing campaign, transactional every %s, OTP every %s. Ctrl-C to stop.

`, base, cfg.Limits.TargetRPS, cfg.Limits.Classes["marketing"].MaxRPS, base, keyAdmin, simURL, o.Limit,
		keyLogin, keyNotify, base, keyLogin, o.Campaign, o.TxnEvery, o.OTPEvery)
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
