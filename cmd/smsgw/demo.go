package main

import (
	"bytes"
	"context"
	"encoding/json"

	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/dashboard"
	"smsgw/internal/gateway"
	"smsgw/internal/provider/sim"
)

func init() {
	register(command{name: "demo", usage: "gateway + provider simulator + a campaign and an OTP trickle, dashboard on :8080", run: runDemo})
}

// Keys the demo prints so the API can be tried by hand. They only ever
// exist in this process.
const (
	demoKeyLogin  = "demo-login-key-0123456789"
	demoKeyNotify = "demo-notify-key-0123456789"
	demoKeyAdmin  = "demo-admin-key-0123456789"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "gateway listen address (the demo keys are printed: keep it on loopback)")
	campaign := fs.Int("campaign", 3000, "marketing messages posted at start")
	otpEvery := fs.Duration("otp-every", 500*time.Millisecond, "interval of the OTP trickle (POST /v1/otp)")
	txnEvery := fs.Duration("txn-every", 200*time.Millisecond, "interval of transactional messages")
	limit := fs.Int("limit", 100, "the simulated provider's contract, messages/s")
	duration := fs.Duration("duration", 0, "stop after this long (0: until Ctrl-C)")
	every := fs.Duration("summary-every", 2*time.Second, "interval of the terminal summary")
	verbose := fs.Bool("v", false, "gateway logs on stderr (info level)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := demo(ctx, demoOptions{listen: *listen, campaign: *campaign, otpEvery: *otpEvery, txnEvery: *txnEvery,
		limit: *limit, every: *every, verbose: *verbose}, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "smsgw demo: %v\n", err)
		return 1
	}
	return 0
}

type demoOptions struct {
	listen             string
	campaign           int
	otpEvery, txnEvery time.Duration
	limit              int
	every              time.Duration
	verbose            bool
}

func demo(ctx context.Context, o demoOptions, stdout, stderr io.Writer) error {
	logLevel := slog.LevelWarn
	if o.verbose {
		logLevel = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel}))

	// The provider simulator enforces the contract the gateway must keep.
	s, err := sim.New(sim.Config{Limit: o.limit, Window: sim.WindowSliding, Logger: log.With("component", "sim")})
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
	yaml := fmt.Sprintf(`listen: %q
store: {path: %q}
provider: {kind: http, url: %q, timeout: 2s}
producers:
  - {name: login, key: %q, classes: [otp], rate: 50, burst: 100}
  - {name: notify-worker, key: %q, classes: [transactional, marketing], rate: 5000, burst: 5000}
admin: {key: %q}
log: {level: warn, format: text}
`, o.listen, filepath.Join(dir, "data"), simURL+"/send", demoKeyLogin, demoKeyNotify, demoKeyAdmin)
	cfg, err := config.Load([]byte(yaml), nil)
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
	fmt.Fprintf(stdout, `smsgw demo
  gateway    %s   (embedded store, local limiter at %g/s, marketing capped at %g/s)
  dashboard  %s/dashboard/   admin key: %s
  provider   simulator at %s, contract %d/s (sliding window)
  producers  login (otp): %s
             notify-worker (transactional, marketing): %s

Try:  curl -s -X POST %s/v1/otp -H 'Authorization: Bearer %s' \
        -H 'Content-Type: application/json' -d '{"to":"+819012345678","body":"Your code is 123456"}'

Posting a %d-message marketing campaign, transactional every %s, OTP every %s. Ctrl-C to stop.

`, base, cfg.Limits.TargetRPS, cfg.Limits.Classes["marketing"].MaxRPS, base, demoKeyAdmin, simURL, o.limit,
		demoKeyLogin, demoKeyNotify, base, demoKeyLogin, o.campaign, o.txnEvery, o.otpEvery)

	d := &demoTraffic{base: base, client: &http.Client{Timeout: 10 * time.Second}}
	if err := d.campaign(ctx, o.campaign); err != nil && ctx.Err() == nil {
		return fmt.Errorf("post campaign: %w", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { d.loop(ctx, o.txnEvery, d.transactional) })
	wg.Go(func() { d.loop(ctx, o.otpEvery, d.otp) })

	start := time.Now()
	tick := time.NewTicker(o.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			d.summary(ctx, stdout, s, time.Since(start))
			fmt.Fprintln(stdout, "stopping")
			return nil
		case <-tick.C:
			d.summary(ctx, stdout, s, time.Since(start))
		}
	}
}

func hostForURL(addr string) string {
	if strings.HasPrefix(addr, "[::]:") || strings.HasPrefix(addr, "0.0.0.0:") {
		return "localhost" + addr[strings.LastIndex(addr, ":"):]
	}
	if strings.HasPrefix(addr, ":") {
		return "localhost" + addr
	}
	return addr
}

type demoTraffic struct {
	base   string
	client *http.Client
	n      atomic.Int64
	otpOK  atomic.Int64
	otpNo  atomic.Int64
}

func (d *demoTraffic) post(ctx context.Context, path, key string, body any) (int, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.base+path, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func demoPhone(i int) string { return fmt.Sprintf("+8190%08d", 10000000+i%80000000) }

func (d *demoTraffic) campaign(ctx context.Context, n int) error {
	for off := 0; off < n; off += 1000 {
		k := min(1000, n-off)
		msgs := make([]map[string]string, k)
		for i := range msgs {
			msgs[i] = map[string]string{"to": demoPhone(off + i), "class": "marketing",
				"body": "Winter sale: 20% off everything this weekend. Reply STOP to opt out."}
		}
		code, err := d.post(ctx, "/v1/messages/batch", demoKeyNotify, map[string]any{"messages": msgs})
		if err != nil {
			return err
		}
		if code >= 300 && code != http.StatusMultiStatus {
			return fmt.Errorf("batch answered %d", code)
		}
	}
	return nil
}

func (d *demoTraffic) loop(ctx context.Context, every time.Duration, f func(context.Context)) {
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
		}
	}
}

func (d *demoTraffic) transactional(ctx context.Context) {
	n := int(d.n.Add(1))
	_, _ = d.post(ctx, "/v1/messages", demoKeyNotify, map[string]string{"to": demoPhone(900000 + n),
		"class": "transactional", "body": "Your order has shipped."})
}

func (d *demoTraffic) otp(ctx context.Context) {
	n := int(d.n.Add(1))
	code, err := d.post(ctx, "/v1/otp", demoKeyLogin, map[string]string{"to": demoPhone(700000 + n), "body": "Your login code is 482913"})
	if err == nil && code == http.StatusOK {
		d.otpOK.Add(1)
	} else if ctx.Err() == nil {
		d.otpNo.Add(1)
	}
}

// summary prints one line: what the provider accepted per class, its 429s,
// the queue depth, and OTP latency from gateway arrival to the provider.
func (d *demoTraffic) summary(ctx context.Context, w io.Writer, s *sim.Sim, elapsed time.Duration) {
	st := s.Stats()
	var depth struct {
		Classes map[string]struct {
			Ready     int64 `json:"ready"`
			Scheduled int64 `json:"scheduled"`
			Leased    int64 `json:"leased"`
		} `json:"classes"`
		Limiter struct {
			Mode string `json:"mode"`
		} `json:"limiter"`
	}
	req, _ := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodGet, d.base+"/v1/admin/stats", nil)
	req.Header.Set("Authorization", "Bearer "+demoKeyAdmin)
	if resp, err := d.client.Do(req); err == nil {
		_ = json.NewDecoder(resp.Body).Decode(&depth)
		resp.Body.Close()
	}
	var sent, queued []string
	for _, c := range []string{"otp", "transactional", "marketing"} {
		sent = append(sent, fmt.Sprintf("%s %d", c, st.PerClass[c]))
		q := depth.Classes[c]
		queued = append(queued, fmt.Sprintf("%s %d", c, q.Ready+q.Scheduled+q.Leased))
	}
	lat := st.Latency["otp"]
	fmt.Fprintf(w, "[%5.0fs] sent: %s | queued: %s | 429s %d | worst 1 s %d/%d | OTP p50 %.1f ms p99 %.1f ms (%d ok, %d refused)\n",
		elapsed.Seconds(), strings.Join(sent, ", "), strings.Join(queued, ", "), st.Rejected429, st.MaxInAny1s, st.Limit,
		lat.P50, lat.P99, d.otpOK.Load(), d.otpNo.Load())
}
