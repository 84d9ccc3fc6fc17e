// Package senderlanes is the bench scenario "sender lanes" (smsgw bench
// --scenario sender-lanes): what a provider that limits each sender sees
// from two gateway replicas on Redis, when the gateway paces only the
// account against when it also paces each sender (limits.senders).
//
// The provider is the simulator: 100 messages a second for the account,
// and per sender (a sliding second each) Mkt1 3/s, Mkt2 40/s, Auth 30/s;
// a send over its sender's limit is answered 429 with {"scope": "sender"}.
// Two replicas (gateway.App, in this process, one Redis account) take a
// marketing campaign of Mkt1Messages from Mkt1 and Mkt2Messages from Mkt2,
// posted at once, while OTPs arrive at OTPRate from Auth through POST
// /v1/otp (the fast path). Each pacing runs against a fresh simulator and
// a fresh account until every campaign message reached the provider:
//
//   - account-only: no limits.senders; the account's and the marketing
//     class's limits only (the gateway still pauses a sender the
//     provider throttles, for its Retry-After);
//   - sender-aware: limits.senders for the three, a tenth below the
//     provider's (as docs/configuration.md advises).
//
// Every figure is counted at the simulator (429s by scope, sends, OTP
// latency from the gateway's acceptance to the provider, duplicates) or
// at the replicas (OTP answers, the campaign held in the queue, messages
// put back for their sender before any provider call).
package senderlanes

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"smsgw/internal/bench"
	"smsgw/internal/config"
	"smsgw/internal/gateway"
	"smsgw/internal/provider/sim"
	"smsgw/internal/tick"
)

// Mode is one way of pacing.
type Mode string

// The pacings compared.
const (
	AccountOnly Mode = "account-only" // no limits.senders
	SenderAware Mode = "sender-aware" // limits.senders for Mkt1, Mkt2, Auth
)

// Modes lists the pacings in table order.
var Modes = []Mode{AccountOnly, SenderAware}

// The scenario's shape.
const (
	Contract        = 100 // the provider's account limit, messages/s
	Replicas        = 2
	DefaultMkt1     = 150
	DefaultMkt2     = 600
	DefaultOTPRate  = 5
	DefaultTimeout  = 5 * time.Minute
	configuredShare = 0.9 // limits.senders: a tenth below the provider's
	sampleEvery     = 200 * time.Millisecond
	stopBound       = 10 * time.Second
)

// Senders are the provider's per-sender limits (messages/s), in table order.
var Senders = []struct {
	Name  string
	Limit int
}{{"Mkt1", 3}, {"Mkt2", 40}, {"Auth", 30}}

// Config is one invocation.
type Config struct {
	RedisAddr string        // loopback only; default bench.DefaultRedisAddr
	Mkt1      int           // campaign messages from Mkt1; default DefaultMkt1
	Mkt2      int           // campaign messages from Mkt2; default DefaultMkt2
	OTPRate   float64       // OTPs per second from Auth; default DefaultOTPRate
	Timeout   time.Duration // a run's bound; default DefaultTimeout
	Modes     []Mode        // default Modes
	Logger    *slog.Logger  // progress; default discard
	// GatewayLogger receives the replicas' logs; default discard.
	GatewayLogger *slog.Logger
}

func (c *Config) setDefaults() error {
	c.RedisAddr = cmp.Or(c.RedisAddr, bench.DefaultRedisAddr)
	c.Mkt1 = cmp.Or(c.Mkt1, DefaultMkt1)
	c.Mkt2 = cmp.Or(c.Mkt2, DefaultMkt2)
	c.OTPRate = cmp.Or(c.OTPRate, DefaultOTPRate)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	if len(c.Modes) == 0 {
		c.Modes = Modes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.GatewayLogger == nil {
		c.GatewayLogger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Mkt1 < 1 || c.Mkt2 < 1 || c.Mkt1+c.Mkt2 > 100_000:
		return fmt.Errorf("senderlanes: campaign %d + %d: want 1 or more each, at most 100,000 in all", c.Mkt1, c.Mkt2)
	case c.OTPRate <= 0 || c.OTPRate > 25:
		return fmt.Errorf("senderlanes: otp rate %v: want (0, 25] (Auth's provider limit is 30/s)", c.OTPRate)
	case c.Timeout < time.Second:
		return fmt.Errorf("senderlanes: timeout %v: want at least 1s", c.Timeout)
	}
	for _, m := range c.Modes {
		if m != AccountOnly && m != SenderAware {
			return fmt.Errorf("senderlanes: pacing %q: want %s or %s", m, AccountOnly, SenderAware)
		}
	}
	return bench.CheckLoopback(c.RedisAddr)
}

// Report is one invocation's results.
type Report struct {
	Replicas int      `json:"replicas"`
	Contract int      `json:"contract_rps"`
	Senders  string   `json:"provider_senders"` // the provider's per-sender limits
	Mkt1     int      `json:"campaign_mkt1"`
	Mkt2     int      `json:"campaign_mkt2"`
	OTPRate  float64  `json:"otp_rps"`
	Results  []Result `json:"results"`
}

// Result is one pacing's run.
type Result struct {
	Mode Mode `json:"pacing"`
	// Configured is limits.senders as configured ("" for none).
	Configured string `json:"limits_senders"`
	// Sender429 are the provider's 429s of the sender's scope, per sender;
	// Account429 the others (the account's).
	Sender429  map[string]int `json:"sender_429"`
	Sender429s int            `json:"sender_429_total"`
	Account429 int            `json:"account_429"`
	// Tries are the sends that reached the provider (accepted or refused).
	Tries int `json:"provider_tries"`
	// PeakHeld is the most campaign messages held in smsgw's queue at once
	// (ready, scheduled and in flight, sampled every 200 ms);
	// SenderWaits the messages smsgw put back for their sender's own limit
	// or pause, without calling the provider (both replicas).
	PeakHeld    int64 `json:"peak_held_in_smsgw"`
	SenderWaits int64 `json:"put_back_for_sender"`
	// OTPs posted, answered 200, refused (any other answer); latency from
	// the gateway's acceptance to the provider (the simulator's figure).
	OTPOffered int     `json:"otp_offered"`
	OTPOK      int     `json:"otp_200"`
	OTPRefused int     `json:"otp_refused"`
	OTPP50MS   float64 `json:"otp_p50_ms"`
	OTPP99MS   float64 `json:"otp_p99_ms"`
	// Seconds from posting the campaign to each sender's last message at
	// the provider, and to the campaign's last.
	Mkt1S     float64 `json:"mkt1_done_s"`
	Mkt2S     float64 `json:"mkt2_done_s"`
	DurationS float64 `json:"duration_s"`
	// Messages accepted by the gateway (campaign and OTPs answered 200);
	// lost: accepted, never at the provider; duplicated: at the provider
	// more than once.
	Messages   int  `json:"messages"`
	Lost       int  `json:"lost"`
	Duplicated int  `json:"duplicated"`
	Finished   bool `json:"finished"` // every campaign message reached the provider within the timeout
}

// Run runs every pacing, one after another.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.setDefaults(); err != nil {
		return Report{}, err
	}
	rep := Report{Replicas: Replicas, Contract: Contract, Senders: providerSenders(), Mkt1: cfg.Mkt1, Mkt2: cfg.Mkt2, OTPRate: cfg.OTPRate}
	admin, err := bench.DialRedis(ctx, cfg.RedisAddr)
	if err != nil {
		return rep, err
	}
	defer func() { _ = admin.Close() }() // the figures are taken
	for _, m := range cfg.Modes {
		res, err := runOne(ctx, cfg, m, admin)
		if err != nil {
			return rep, err
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, nil
}

func providerSenders() string {
	parts := make([]string, len(Senders))
	for i, s := range Senders {
		parts[i] = fmt.Sprintf("%s=%d", s.Name, s.Limit)
	}
	return strings.Join(parts, ",")
}

// configured is limits.senders of the sender-aware pacing, as YAML and
// as shown.
func configured() (yaml, shown string) {
	var y, s []string
	for _, p := range Senders {
		r := strconv.FormatFloat(float64(p.Limit)*configuredShare, 'g', 4, 64)
		y = append(y, fmt.Sprintf("%s: {max_rps: %s}", p.Name, r))
		s = append(s, p.Name+"="+r)
	}
	return "{" + strings.Join(y, ", ") + "}", strings.Join(s, ",")
}

// Keys of the scenario's producers; they exist only in this process.
const (
	keyCampaign = "bench-campaign-key-0123456789"
	keyLogin    = "bench-login-key-0123456789ab"
	keyAdmin    = "bench-admin-key-0123456789ab"
)

func gatewayConfig(m Mode, redisAddr, account, sendURL string) (config.Config, error) {
	senders := ""
	if m == SenderAware {
		y, _ := configured()
		senders = ", senders: " + y
	}
	yaml := fmt.Sprintf(`listen: "127.0.0.1:0"
redis: {addr: %q}
account: %q
provider: {kind: http, url: %q, timeout: 2s, contract_rps: %d}
limits: {max_senders: %d%s}
producers:
  - {name: campaign, key: %q, classes: [marketing], rate: 100000, burst: 100000, senders: [Mkt1, Mkt2]}
  - {name: login, key: %q, classes: [otp], rate: 1000, burst: 1000, senders: [Auth]}
admin: {key: %q}
dispatch: {shutdown_timeout: 5s}
`, redisAddr, account, sendURL, Contract, Replicas, senders, keyCampaign, keyLogin, keyAdmin)
	return config.Load([]byte(yaml), nil)
}

// replica is one running gateway and its metrics.
type replica struct {
	app *gateway.App
	reg *prometheus.Registry
	url string
}

// runOne runs one pacing against a fresh simulator and account.
func runOne(ctx context.Context, cfg Config, m Mode, admin *redis.Client) (res Result, err error) {
	log := cfg.Logger.With("pacing", m)
	limits := map[string]int{}
	for _, s := range Senders {
		limits[s.Name] = s.Limit
	}
	s, err := sim.New(sim.Config{Limit: Contract, Window: sim.WindowSliding, Senders: limits, SuspendAfter: -1,
		Logger: cfg.GatewayLogger.With("component", "sim")})
	if err != nil {
		return Result{}, fmt.Errorf("senderlanes: %w", err)
	}
	simURL, err := s.Start("127.0.0.1:0")
	if err != nil {
		return Result{}, fmt.Errorf("senderlanes: start simulator: %w", err)
	}
	defer func() { _ = s.Close() }() // the figures are taken

	account := randomAccount()
	defer func() {
		if cerr := bench.Cleanup(ctx, admin, account); cerr != nil {
			log.Warn("senderlanes: redis keys left behind", "account", account, "err", cerr)
		}
	}()
	gcfg, err := gatewayConfig(m, cfg.RedisAddr, account, simURL+"/send")
	if err != nil {
		return Result{}, fmt.Errorf("senderlanes: gateway configuration: %w", err)
	}
	reps := make([]*replica, 0, Replicas)
	defer func() {
		for _, r := range reps {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopBound)
			if serr := r.app.Stop(sctx); serr != nil {
				log.Warn("senderlanes: stop replica", "err", serr)
			}
			cancel()
		}
	}()
	for i := range Replicas {
		reg := prometheus.NewRegistry()
		app, err := gateway.New(ctx, gcfg, gateway.Options{Logger: cfg.GatewayLogger.With("replica", i), Registerer: reg,
			Owner: fmt.Sprintf("bench-%s-%d", account, i), DrainDelay: time.Millisecond})
		if err != nil {
			return Result{}, fmt.Errorf("senderlanes: replica %d: %w", i, err)
		}
		if err := app.Start(ctx); err != nil {
			_ = app.Stop(context.WithoutCancel(ctx)) // the start error is the one to report
			return Result{}, fmt.Errorf("senderlanes: start replica %d: %w", i, err)
		}
		reps = append(reps, &replica{app: app, reg: reg, url: "http://" + app.Addr()})
	}
	log.Info("senderlanes: run", "replicas", Replicas, "mkt1", cfg.Mkt1, "mkt2", cfg.Mkt2)
	return drive(ctx, cfg, m, s, reps)
}

// drive posts the campaign and the OTPs and waits until the campaign
// reached the provider (or the timeout), then reads the figures.
func drive(ctx context.Context, cfg Config, m Mode, s *sim.Sim, reps []*replica) (Result, error) {
	cl := &client{http: &http.Client{Timeout: 10 * time.Second}}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	start := time.Now()

	otpCtx, stopOTP := context.WithCancel(runCtx)
	defer stopOTP()
	o := &otps{log: cfg.Logger}
	var wg sync.WaitGroup
	wg.Go(func() { o.trickle(otpCtx, cl, reps, cfg.OTPRate) })

	var ids []string
	for _, part := range []struct {
		from string
		n    int
		to   *replica
	}{{"Mkt1", cfg.Mkt1, reps[0]}, {"Mkt2", cfg.Mkt2, reps[len(reps)-1]}} {
		got, err := cl.campaign(runCtx, part.to.url, part.from, len(ids), part.n)
		if err != nil {
			stopOTP()
			wg.Wait()
			return Result{}, err
		}
		ids = append(ids, got...)
	}

	var peak int64
	finished := false
	for {
		if held, err := cl.held(runCtx, reps[0].url); err == nil {
			peak = max(peak, held)
		}
		st := s.Stats()
		if st.Senders["Mkt1"].Accepted >= cfg.Mkt1 && st.Senders["Mkt2"].Accepted >= cfg.Mkt2 {
			finished = true
			break
		}
		if !tick.Sleep(runCtx, sampleEvery) {
			break
		}
	}
	stopOTP()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("senderlanes: interrupted: %w", err)
	}
	// The OTPs answered 200 are at the provider before their answer.
	return result(m, s, reps, o, ids, start, peak, finished), nil
}

// result reads the run's figures from the simulator and the replicas.
func result(m Mode, s *sim.Sim, reps []*replica, o *otps, ids []string, start time.Time, peak int64, finished bool) Result {
	st := s.Stats()
	res := Result{Mode: m, Sender429: map[string]int{}, PeakHeld: peak, Finished: finished,
		OTPOffered: int(o.offered.Load()), OTPOK: len(o.ok()), OTPRefused: int(o.refused.Load())}
	if m == SenderAware {
		_, res.Configured = configured()
	}
	for _, p := range Senders {
		res.Sender429[p.Name] = st.Senders[p.Name].Rejected429
		res.Sender429s += st.Senders[p.Name].Rejected429
	}
	res.Account429 = st.Rejected429 - res.Sender429s
	res.Tries = st.Accepted + st.Rejected429
	if l, ok := st.Latency["otp"]; ok {
		res.OTPP50MS, res.OTPP99MS = l.P50, l.P99
	}
	for _, r := range reps {
		res.SenderWaits += counterSum(r.reg, "smsgw_dispatch_sender_waits_total")
	}
	last := map[string]time.Time{}
	seen := map[string]int{}
	for _, rec := range s.Accepted() {
		seen[rec.Reference]++
		if rec.At.After(last[rec.From]) {
			last[rec.From] = rec.At
		}
	}
	since := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return t.Sub(start).Seconds()
	}
	res.Mkt1S, res.Mkt2S = since(last["Mkt1"]), since(last["Mkt2"])
	res.DurationS = max(res.Mkt1S, res.Mkt2S)
	all := slices.Concat(ids, o.ok())
	res.Messages = len(all)
	for _, id := range all {
		switch n := seen[id]; {
		case n == 0:
			res.Lost++
		case n > 1:
			res.Duplicated++
		}
	}
	return res
}

// counterSum is the sum of every series of the counter name in reg.
func counterSum(reg prometheus.Gatherer, name string) int64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return int64(n)
}

func randomAccount() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "bench-" + hex.EncodeToString(b[:])
}

// phone is the i-th recipient: distinct numbers of one mobile range.
func phone(i int) string { return "+8190" + fmt.Sprintf("%08d", 10000000+i%90000000) }

// otps is the OTP trickle's outcome.
type otps struct {
	offered, refused atomic.Int64
	log              *slog.Logger
	mu               sync.Mutex
	ids              []string // answered 200
}

func (o *otps) ok() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.ids...)
}

// trickle posts an OTP every 1/rate, alternating replicas, until ctx ends,
// and waits for every answer.
func (o *otps) trickle(ctx context.Context, cl *client, reps []*replica, rate float64) {
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	var wg sync.WaitGroup
	defer wg.Wait()
	for k := 0; ; k++ {
		if !tick.Sleep(ctx, time.Until(start.Add(time.Duration(k)*interval))) {
			return
		}
		o.offered.Add(1)
		r := reps[k%len(reps)]
		wg.Go(func() {
			// Each OTP has its own bound, not the trickle's: the last one
			// is answered even when the trickle stops meanwhile.
			octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			var ans struct {
				ID string `json:"id"`
			}
			code, err := cl.do(octx, http.MethodPost, r.url+"/v1/otp", keyLogin,
				map[string]string{"to": phone(1_000_000 + k), "body": "Your code is " + strconv.Itoa(100000+k%900000), "from": "Auth"}, &ans)
			if err != nil || code != http.StatusOK || ans.ID == "" {
				o.refused.Add(1)
				o.log.Warn("senderlanes: an OTP refused", "status", code, "err", err)
				return
			}
			o.mu.Lock()
			o.ids = append(o.ids, ans.ID)
			o.mu.Unlock()
		})
	}
}

// client talks to the replicas' API.
type client struct{ http *http.Client }

// do sends body as JSON with key and decodes a 2xx answer into out.
func (c *client) do(ctx context.Context, method, url, key string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	res, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = res.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	if err != nil {
		return res.StatusCode, err
	}
	if out != nil && res.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			return res.StatusCode, fmt.Errorf("decode %s answer: %w", url, err)
		}
	}
	return res.StatusCode, nil
}

// maxBatch is the most messages one batch request takes.
const maxBatch = 1000

// campaign posts n marketing messages from sender through the batch
// endpoint at base, recipients from first on, and returns their ids.
func (c *client) campaign(ctx context.Context, base, from string, first, n int) ([]string, error) {
	var ids []string
	for done := 0; done < n; {
		k := min(maxBatch, n-done)
		msgs := make([]map[string]string, k)
		for i := range msgs {
			msgs[i] = map[string]string{"to": phone(first + done + i), "body": "Sale " + strconv.Itoa(first+done+i), "class": "marketing", "from": from}
		}
		var ans struct {
			Results []struct {
				Status  int `json:"status"`
				Message struct {
					ID string `json:"id"`
				} `json:"message"`
			} `json:"results"`
		}
		code, err := c.do(ctx, http.MethodPost, base+"/v1/messages/batch", keyCampaign, map[string]any{"messages": msgs}, &ans)
		if err != nil {
			return nil, fmt.Errorf("senderlanes: post campaign from %s: %w", from, err)
		}
		if len(ans.Results) != k {
			return nil, fmt.Errorf("senderlanes: post campaign from %s: answered %d with %d results", from, code, len(ans.Results))
		}
		for i, r := range ans.Results {
			if r.Status != http.StatusAccepted {
				return nil, fmt.Errorf("senderlanes: campaign from %s: item %d answered %d", from, i, r.Status)
			}
			ids = append(ids, r.Message.ID)
		}
		done += k
	}
	return ids, nil
}

// held is the marketing messages held in the queue (ready, scheduled, in
// flight), as the stats answer of base says.
func (c *client) held(ctx context.Context, base string) (int64, error) {
	var st struct {
		Classes map[string]struct {
			Ready, Scheduled, Leased int64
		} `json:"classes"`
	}
	code, err := c.do(ctx, http.MethodGet, base+"/v1/admin/stats", keyAdmin, nil, &st)
	if err != nil {
		return 0, err
	}
	mk, ok := st.Classes["marketing"]
	if code != http.StatusOK || !ok {
		return 0, errors.New("senderlanes: no queue figures")
	}
	return mk.Ready + mk.Scheduled + mk.Leased, nil
}
