package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"smsgw/internal/queue"
)

// Destination is where one event goes and the keys that sign it.
type Destination struct {
	URL string
	Key []byte
	// PreviousKey, while the producer's secret is rotated
	// (webhook.previous_secret), is the key Key replaces: every delivery
	// then carries a signature with each, Key's first (Signatures). Nil:
	// one signature.
	PreviousKey []byte
	// Client, when not nil, delivers to this destination in place of
	// Config.Client: a producer's own allow_networks.
	Client *http.Client
}

// Config configures a Deliverer.
type Config struct {
	Outbox queue.Outbox
	// Resolve names an event's destination: its callback_url, else its
	// producer's webhook url, with the producer's key. false: the producer
	// has no webhook, or the callback_url is not allowed, in this replica's
	// configuration; the event is retried with backoff until MaxAge (in a
	// rolling change another replica may have it), then dead.
	Resolve func(e *queue.Event) (Destination, bool)
	Client  *http.Client // NewClient
	Owner   string       // this replica, recorded with claims
	Logger  *slog.Logger
	Metrics *Metrics

	Workers     int           // deliveries in flight in this replica
	PerEndpoint int           // deliveries in flight per endpoint (scheme://host)
	Timeout     time.Duration // one attempt (the client's timeout too)
	MaxAge      time.Duration // retried until then after the event, then dead
	// BackoffBase and BackoffMax bound the wait after a failed attempt
	// (Backoff); BackoffMax also caps what an endpoint's Retry-After can
	// ask for (nextWait).
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// BreakerFailures consecutive attempts of an endpoint that got no
	// answer (timeout, connection failed or refused) open its breaker for
	// BreakerOpen; its events wait without spending attempts. An HTTP
	// answer, 2xx or not, closes it: an endpoint that answers 503 at once
	// costs nobody else anything, and each event's own backoff handles it.
	BreakerFailures int
	BreakerOpen     time.Duration
	// Idle is how long the loop waits after finding nothing due (default
	// 200 ms); each further empty look doubles it up to IdleMax (default
	// 5 s), so that idle replicas cost Redis little; finding events or a
	// Wake resets it. New events wake the replica that wrote them, so the
	// look only finds retries falling due and the events of a replica that
	// died: with n replicas looking, one is found within IdleMax/n on
	// average. Now is the clock of webhook-timestamp (default
	// time.Now).
	Idle    time.Duration
	IdleMax time.Duration
	Now     func() time.Time
}

// Deliverer claims due events from the outbox and delivers them. Any number
// of replicas run one each over the same outbox.
type Deliverer struct {
	cfg   Config
	log   *slog.Logger
	eps   *endpoints
	slots chan struct{}
	wake  chan struct{}

	stop    chan struct{}
	done    chan struct{}
	running sync.WaitGroup
}

// New checks cfg and returns a Deliverer that does nothing before Start.
func New(cfg Config) (*Deliverer, error) {
	if cfg.Outbox == nil || cfg.Resolve == nil || cfg.Client == nil || cfg.Metrics == nil {
		return nil, errors.New("webhook: Outbox, Resolve, Client and Metrics are required")
	}
	if cfg.Workers < 1 || cfg.PerEndpoint < 1 || cfg.Timeout <= 0 || cfg.MaxAge <= 0 || cfg.BackoffBase <= 0 ||
		cfg.BackoffMax < cfg.BackoffBase || cfg.BreakerFailures < 1 || cfg.BreakerOpen <= 0 {
		return nil, fmt.Errorf("webhook: invalid config %+v", cfg)
	}
	if cfg.Idle <= 0 {
		cfg.Idle = 200 * time.Millisecond
	}
	if cfg.IdleMax < cfg.Idle {
		cfg.IdleMax = max(cfg.Idle, DefaultIdleMax)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Deliverer{
		cfg: cfg, log: log.With("component", "webhooks"),
		eps:   newEndpoints(cfg.PerEndpoint, cfg.BreakerFailures, cfg.BreakerOpen),
		slots: make(chan struct{}, cfg.Workers),
		wake:  make(chan struct{}, 1),
	}, nil
}

// lease is how long a claim holds an event: longer than an attempt and
// its ack, so that a live replica keeps what it is delivering, and short,
// so that the events of a replica that died go out soon after.
func (d *Deliverer) lease() time.Duration { return 2*d.cfg.Timeout + 2*time.Second }

// Start runs the loop until Stop or ctx ends.
func (d *Deliverer) Start(ctx context.Context) {
	d.stop, d.done = make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		<-d.stop
		cancel()
	}()
	go func() {
		defer close(d.done)
		d.run(ctx)
		d.running.Wait()
	}()
}

// Stop ends the loop, cuts the deliveries in flight short and waits for
// them to return. An event whose attempt was cut short is due again at
// once, without an attempt spent; it may have reached its endpoint, and is
// delivered again with the same webhook-id (at least once).
func (d *Deliverer) Stop() {
	if d.stop == nil {
		return
	}
	close(d.stop)
	<-d.done
	d.stop = nil
}

// DefaultIdleMax is Config.IdleMax when unset.
const DefaultIdleMax = 5 * time.Second

// Wake makes an idle loop look for due events now.
func (d *Deliverer) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *Deliverer) run(ctx context.Context) {
	idle := d.cfg.Idle
	for ctx.Err() == nil {
		free := d.cfg.Workers - len(d.slots)
		if free == 0 {
			// Wait for a slot: take one and give it back at once.
			select {
			case d.slots <- struct{}{}:
				<-d.slots
			case <-ctx.Done():
				return
			}
			continue
		}
		n, err := d.once(ctx, free)
		if err != nil && ctx.Err() == nil {
			d.log.Warn("claiming callbacks failed", "err", err)
		}
		if n > 0 && err == nil {
			idle = d.cfg.Idle
			continue
		}
		t := time.NewTimer(idle)
		select {
		case <-t.C:
			idle = min(2*idle, d.cfg.IdleMax)
		case <-d.wake:
			idle = d.cfg.Idle
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// once claims up to free events and starts or defers each; it returns how
// many it claimed.
func (d *Deliverer) once(ctx context.Context, free int) (int, error) {
	evs, err := d.cfg.Outbox.ClaimEvents(ctx, d.cfg.Owner, d.lease(), free)
	if err != nil {
		return 0, err
	}
	for _, le := range evs {
		d.dispatch(ctx, le)
	}
	return len(evs), nil
}

func (d *Deliverer) dispatch(ctx context.Context, le *queue.LeasedEvent) {
	dest, ok := d.cfg.Resolve(le.Event)
	if !ok {
		// Retried with backoff until MaxAge, then dead: during a rolling
		// configuration change another replica may have the destination
		// (the outbox is shared), and an attempt is spent so the waits
		// grow.
		d.retry(ctx, le, "", d.nextWait(le.Event.Attempts+1, 0), true, "no destination configured or allowed", false)
		return
	}
	ep := endpointOf(dest.URL)
	e, wait, why := d.eps.acquire(ep, d.cfg.Now())
	if e == nil {
		d.cfg.Metrics.deferred.WithLabelValues(why).Inc()
		// Back later without spending an attempt; the jitter spreads a
		// busy endpoint's events so the next claims reach other producers'.
		// An event never tried says why it waits; a tried one keeps the
		// error of its last attempt.
		detail := ""
		if le.Event.Attempts == 0 {
			detail = "not tried yet: endpoint " + why
		}
		d.retry(ctx, le, ep, wait+jitter(wait/2+50*time.Millisecond), false, detail, false)
		return
	}
	d.slots <- struct{}{}
	d.running.Add(1)
	go func() {
		defer d.running.Done()
		defer func() { <-d.slots }()
		began := d.cfg.Now()
		answered := d.deliver(ctx, le, dest, ep)
		done := d.cfg.Now()
		d.eps.release(e, answered, done, done.Sub(began))
	}()
}

// deliver makes one attempt and records its outcome; true when the
// endpoint answered (whatever the status).
func (d *Deliverer) deliver(ctx context.Context, le *queue.LeasedEvent, dest Destination, ep string) bool {
	ev := le.Event
	body, err := Body(ev)
	if err != nil {
		d.retry(ctx, le, ep, 0, false, "unencodable event", true)
		return false
	}
	start := time.Now()
	a := d.attempt(ctx, ev.ID, dest, body)
	if a.outcome != OutcomeDelivered && ctx.Err() != nil {
		// Stop cut the attempt short: not the endpoint's failure, so no
		// attempt is spent, no error stored and no backoff taken; the
		// event is due again at once (it may have arrived: it goes again
		// with the same webhook-id, at least once).
		d.log.Debug("callback attempt cut short by stop; due again", "event", ev.ID, "endpoint", ep)
		d.retry(ctx, le, ep, 0, false, "", false)
		return true // nothing to hold against the endpoint's breaker
	}
	d.cfg.Metrics.attempts.WithLabelValues(a.outcome).Inc()
	d.cfg.Metrics.duration.Observe(time.Since(start).Seconds())
	switch a.outcome {
	case OutcomeDelivered:
		if err := d.cfg.Outbox.AckEvent(context.WithoutCancel(ctx), le); err != nil {
			// Lost the claim (it outlived its lease): the event may go out
			// again, with the same id and body.
			d.log.Warn("acking a delivered callback failed", "event", ev.ID, "endpoint", ep, "err", err)
		}
		return true
	case OutcomeGone:
		// The endpoint does not want this event: dead now, listed like any
		// other dead event (an operator may still retry it). An answer, so
		// nothing against the breaker.
		d.retry(ctx, le, ep, 0, true, a.detail, true)
		return true
	}
	after := d.nextWait(ev.Attempts+1, a.retryAfter)
	detail := a.detail
	if a.retryAfter > 0 {
		detail += " (Retry-After: next attempt in " + after.Round(time.Second).String() + ")"
	}
	d.retry(ctx, le, ep, after, true, detail, false)
	return a.outcome == OutcomeRejected
}

// nextWait is the wait before attempt n+1 after n failed attempts, the one
// place that decides it: the backoff, or longer when the endpoint asked
// for longer with Retry-After (asked; 0 when it did not), up to
// BackoffMax: an endpoint can slow its own events down to our slowest
// retry pace, never further, and never speed them up.
func (d *Deliverer) nextWait(n int, asked time.Duration) time.Duration {
	return max(Backoff(n, d.cfg.BackoffBase, d.cfg.BackoffMax), min(asked, d.cfg.BackoffMax))
}

// Outcomes of an attempt (the outcome label of smsgw_callbacks_attempts_total).
const (
	OutcomeDelivered = "delivered" // 2xx
	OutcomeRejected  = "rejected"  // any other status
	OutcomeGone      = "gone"      // 410 Gone: the endpoint does not want the event; given up at once
	OutcomeTimeout   = "timeout"
	OutcomeError     = "error"   // connection failed, reset, bad URL
	OutcomeRefused   = "refused" // the destination's address is not allowed
)

// Outcomes lists every attempt outcome.
var Outcomes = []string{OutcomeDelivered, OutcomeRejected, OutcomeGone, OutcomeTimeout, OutcomeError, OutcomeRefused}

// answer is what one attempt got.
type answer struct {
	outcome string // Outcome*
	// detail is safe to store and log: no URL (it may carry a token), no
	// response body, nothing the endpoint wrote but its status code.
	detail string
	// retryAfter is the wait a 429 or 503 asked for with Retry-After (0:
	// none, or not one of those statuses); nextWait bounds it.
	retryAfter time.Duration
}

// attempt posts body once.
func (d *Deliverer) attempt(ctx context.Context, id string, dest Destination, body []byte) answer {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dest.URL, bytes.NewReader(body))
	if err != nil {
		return answer{outcome: OutcomeError, detail: "invalid callback url"}
	}
	ts := d.cfg.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "smsgw-webhooks/1")
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(HeaderSignature, Signatures(dest, id, ts, body))
	client := d.cfg.Client
	if dest.Client != nil {
		client = dest.Client
	}
	resp, err := client.Do(req)
	switch {
	case err != nil && refusedErr(err):
		return answer{outcome: OutcomeRefused, detail: "destination address not allowed (allow_networks)"}
	case err != nil && timeoutErr(err):
		return answer{outcome: OutcomeTimeout, detail: "timeout"}
	case err != nil:
		return answer{outcome: OutcomeError, detail: "connection failed"}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return answerOf(resp, d.cfg.Now())
}

// answerOf reads an endpoint's answer: its status code and, for 429 and
// 503, Retry-After. Nothing else the endpoint sent is used.
func answerOf(resp *http.Response, now time.Time) answer {
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return answer{outcome: OutcomeDelivered}
	case code == http.StatusGone:
		return answer{outcome: OutcomeGone, detail: "endpoint answered 410 Gone"}
	}
	a := answer{outcome: OutcomeRejected, detail: "HTTP " + strconv.Itoa(code)}
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		a.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), now)
	}
	return a
}

// parseRetryAfter reads a Retry-After value, delay-seconds or an HTTP-date
// (RFC 9110 10.2.3), as a wait from now; 0 for anything else, and for a
// date past. A number of seconds too large for a Duration saturates (the
// caller caps it far lower). The provider adapters read Retry-After with
// provider.RetryAfterGiven; this package may not import provider (the
// layering test), and an endpoint's answer needs neither its floor nor
// its fractions.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if strings.Trim(v, "0123456789") == "" {
		const most = int64(1<<63-1) / int64(time.Second)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > most { // only a range error is possible: digits alone
			n = most
		}
		return time.Duration(n) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	return max(t.Sub(now), 0)
}

// retry ends the claim without delivery: due again after after, or dead
// past the max age (now, with giveUp).
func (d *Deliverer) retry(ctx context.Context, le *queue.LeasedEvent, ep string, after time.Duration, spend bool, detail string, giveUp bool) {
	maxAge := d.cfg.MaxAge
	if giveUp {
		maxAge = 0
		after = time.Millisecond
	}
	dead, err := d.cfg.Outbox.RetryEvent(context.WithoutCancel(ctx), le, queue.EventRetry{
		After: after, SpendAttempt: spend, LastError: detail, MaxAge: maxAge,
	})
	if err != nil {
		d.log.Warn("rescheduling a callback failed", "event", le.Event.ID, "endpoint", ep, "err", err)
		return
	}
	if dead {
		d.cfg.Metrics.dead.Inc()
		d.log.Warn("callback given up", "event", le.Event.ID, "message", le.Event.MessageID,
			"producer", le.Event.Producer, "endpoint", ep, "attempts", le.Event.Attempts+boolInt(spend), "last_error", detail)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Backoff is the wait before attempt n+1 after n failed attempts:
// exponential from base, capped at max, with jitter over its upper half.
func Backoff(n int, base, maxWait time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < maxWait; i++ {
		d *= 2
	}
	d = min(d, maxWait)
	return d/2 + jitter(d/2)
}

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// endpointOf is the unit of concurrency and breaking: scheme://host[:port].
// Paths and queries are left out, so that it can be logged.
func endpointOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "invalid"
	}
	// One endpoint however its URL spells it: host in any case, the
	// scheme's default port written or not.
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if port == "" || scheme == "http" && port == "80" || scheme == "https" && port == "443" {
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		return scheme + "://" + host
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}
