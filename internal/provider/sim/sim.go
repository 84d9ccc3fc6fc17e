// Package sim is the provider simulator: an SMS provider that enforces the
// contract of docs/design.md section 1 exactly and records everything it accepts,
// so that tests and benchmarks measure the gateway at the provider.
//
// It speaks the generic protocol (package httpprov): POST /send with
// {"to","from","body","reference","segments","class"}, answering 200
// {"id":"sim-N"}. A send costs "segments" units (1 when absent or < 1).
// Over the limit it answers 429 with Retry-After. Config.Senders limits
// senders (the "from") as well: over a sender's limit, or while a sender is
// throttled, the 429's body says {"scope": "sender"}. More than SuspendAfter 429s
// in a rolling SuspendWindow suspend the account (403 {"error":"account
// suspended"} with Retry-After) for SuspendFor. A rejected send changes no
// counter of the limit.
//
// Control and measurement endpoints:
//
//	GET  /stats     Stats as JSON
//	GET  /accepted  every accepted send (Record) as JSON, in acceptance order
//	POST /reset     forget all sends, 429s and suspension; faults back to Config
//	GET  /control   current faults
//	POST /control   change faults at run time (Control, JSON), or throttle one sender
//	GET  /healthz
package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"smsgw/internal/sms"
	"smsgw/internal/tick"
)

// Record is one accepted send.
type Record struct {
	At time.Time `json:"at"` // when the simulator accepted it
	// Elapsed is At on the simulator's monotonic clock: how long after it
	// started it accepted the send. Intervals between records read from
	// it hold when the machine's wall clock is stepped (At does not).
	Elapsed    time.Duration `json:"elapsed_ns"`
	Arrived    time.Time     `json:"arrived"`              // when the request arrived (before injected latency)
	ID         string        `json:"id"`                   // the simulator's provider id
	Reference  string        `json:"reference"`            // the gateway's message id
	To         string        `json:"to"`                   // recipient as sent
	From       string        `json:"from,omitempty"`       // sender as sent
	Body       string        `json:"body"`                 // text as sent
	Class      string        `json:"class,omitempty"`      // the optional "class" field
	Units      int           `json:"units"`                // units of rate it cost
	AcceptedAt time.Time     `json:"accepted_at,omitzero"` // the gateway's acceptance time (X-Smsgw-Accepted-At), if sent
	Duplicate  bool          `json:"duplicate,omitempty"`  // its reference was accepted before
	Receipt    string        `json:"receipt,omitempty"`    // the status of the receipt posted for it (Config.Receipts)

	key string // the request's Idempotency-Key
}

// Sim is one simulated provider account. It is safe for concurrent use.
type Sim struct {
	cfg   Config
	now   func() time.Time
	start time.Time              // s.now() at New: Record.Elapsed counts from it
	done  chan struct{}          // closed by Close: releases hanging requests
	rcpt  atomic.Pointer[poster] // nil until receipts are configured (Config.Receipts, EnableReceipts)

	mu          sync.Mutex
	limit       int
	faults      Faults
	throttleEnd time.Time     // throttle_all: every send is 429 until then
	recent      slidingWindow // sliding: the account's trailing second
	fixedIdx    int64         // fixed: index of the current window
	fixedSum    int
	tooMany     []time.Time // 429 times within the suspension window, oldest first
	suspendEnd  time.Time
	records     []Record
	refs        map[string]int
	idem        map[string]string  // Idempotency-Key -> provider id of its first accept
	senders     map[string]*sender // the configured senders and at most MaxSeenSenders more
	otherSends  int                // accepts from senders past that bound
	counters    counters
	nextID      uint64

	srvMu sync.Mutex
	srv   *http.Server
	ln    net.Listener
	serve chan struct{} // closed when Serve returns
}

type unitAt struct {
	at    time.Time
	units int
}

type counters struct {
	rejected429 int
	rejected403 int
	failed5xx   int
	timeouts    int
	lostReplies int
	badRequests int
	suspensions int
	replays     int
}

// New validates cfg and returns a simulator; it does not listen until Start
// (or mount Handler yourself).
func New(cfg Config) (*Sim, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Sim{cfg: cfg, now: cfg.Now, done: make(chan struct{})}
	s.start = s.now()
	s.resetLocked()
	if len(cfg.Receipts.URLs) > 0 {
		s.rcpt.Store(newPoster(cfg.Receipts, s.done))
	}
	return s, nil
}

func (s *Sim) resetLocked() {
	s.limit = s.cfg.Limit
	s.faults = s.cfg.Faults
	s.throttleEnd = time.Time{}
	s.recent = slidingWindow{}
	s.fixedIdx, s.fixedSum = math.MinInt64, 0
	s.tooMany = nil
	s.suspendEnd = time.Time{}
	s.records = nil
	s.refs = map[string]int{}
	s.idem = map[string]string{}
	s.counters = counters{}
	s.resetSendersLocked()
	s.otherSends = 0
}

// Reset forgets every send, 429 and suspension and restores the faults and
// limit of the Config.
func (s *Sim) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetLocked()
}

// Control is a run-time change of faults (POST /control). Nil fields are left
// as they are; Clear first removes every fault, throttle_all and every
// sender's throttle included.
type Control struct {
	Clear          bool      `json:"clear,omitempty"`
	Latency        *Duration `json:"latency,omitempty"`
	LatencyJitter  *Duration `json:"latency_jitter,omitempty"`
	FailRate       *float64  `json:"fail_rate,omitempty"`
	FailStatus     *int      `json:"status,omitempty"`
	TimeoutRate    *float64  `json:"timeout_rate,omitempty"`
	LostReplyRate  *float64  `json:"lost_reply_rate,omitempty"`
	ThrottleAllFor *Duration `json:"throttle_all_for,omitempty"` // answer 429 to every send for this long, from now
	// ThrottleSender answers the sender-scoped 429 to every send from one
	// sender for a while, from now (0: lift it).
	ThrottleSender *SenderThrottle `json:"throttle_sender,omitempty"`
	Limit          *int            `json:"limit,omitempty"` // change the contract's limit (0: unlimited)
}

// ControlState is the answer to GET/POST /control.
type ControlState struct {
	Faults       Faults    `json:"faults"`
	Limit        int       `json:"limit"`
	ThrottledTil time.Time `json:"throttled_until,omitzero"`
	// SendersThrottled is when each throttled sender's throttle ends.
	SendersThrottled map[string]time.Time `json:"senders_throttled_until,omitempty"`
}

// Apply changes faults at run time.
func (s *Sim) Apply(c Control) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults
	if c.Clear {
		f = Faults{}
	}
	set := func(dst *Duration, v *Duration) {
		if v != nil {
			*dst = *v
		}
	}
	setF := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	set(&f.Latency, c.Latency)
	set(&f.LatencyJitter, c.LatencyJitter)
	setF(&f.FailRate, c.FailRate)
	setF(&f.TimeoutRate, c.TimeoutRate)
	setF(&f.LostReplyRate, c.LostReplyRate)
	if c.FailStatus != nil {
		f.FailStatus = *c.FailStatus
	}
	if err := f.validate(); err != nil {
		return fmt.Errorf("sim: control: %w", err)
	}
	if c.ThrottleAllFor != nil && *c.ThrottleAllFor < 0 {
		return fmt.Errorf("sim: control: throttle_all_for must not be negative")
	}
	var throttled *sender
	if t := c.ThrottleSender; t != nil {
		if t.For < 0 {
			return fmt.Errorf("sim: control: throttle_sender.for must not be negative")
		}
		if throttled = s.senderLocked(t.From); throttled == nil {
			return fmt.Errorf("sim: control: throttle_sender.from: empty, or more than %d senders seen", MaxSeenSenders)
		}
	}
	s.faults = f
	if c.Clear {
		s.throttleEnd = time.Time{}
		for _, p := range s.senders {
			p.throttleEnd = time.Time{}
		}
	}
	if throttled != nil {
		throttled.throttleEnd = s.now().Add(time.Duration(c.ThrottleSender.For))
		s.cfg.Logger.Info("sim: throttling one sender", "from", sms.MaskPhone(c.ThrottleSender.From),
			"for", time.Duration(c.ThrottleSender.For))
	}
	if c.Limit != nil {
		s.limit = *c.Limit
	}
	if c.ThrottleAllFor != nil {
		s.throttleEnd = s.now().Add(time.Duration(*c.ThrottleAllFor))
		s.cfg.Logger.Info("sim: throttling every send", "for", time.Duration(*c.ThrottleAllFor))
	}
	return nil
}

func (s *Sim) controlState() ControlState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := ControlState{Faults: s.faults, Limit: s.limit, ThrottledTil: s.throttleEnd}
	now := s.now()
	for from, p := range s.senders {
		if now.Before(p.throttleEnd) {
			if st.SendersThrottled == nil {
				st.SendersThrottled = map[string]time.Time{}
			}
			st.SendersThrottled[from] = p.throttleEnd
		}
	}
	return st
}

// Accepted returns a copy of every accepted send, in acceptance order.
func (s *Sim) Accepted() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.records)
}

// outcome is the decision for one send.
type outcome int

const (
	accepted outcome = iota
	throttled
	throttledSender // the sender's limit or throttle: a 429 with "scope": "sender"
	suspended
	replayed // an Idempotency-Key seen before: the first answer again
)

// decide applies the contract to a send and records it if accepted. It is
// the only place that changes the limit's counters, and it changes them only
// on acceptance. The time is read under the lock so that accept times are in
// the same order as decisions: a time read before the lock could be older
// than an accept another request made meanwhile, and the window would then
// be judged against entries already dropped.
func (s *Sim) decide(rec Record) (outcome, time.Duration, Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if now.Before(s.suspendEnd) {
		s.counters.rejected403++
		return suspended, s.suspendEnd.Sub(now), rec
	}
	if now.Before(s.throttleEnd) {
		// The pause covers the whole throttle, so a client that honours
		// Retry-After sees at most one 429 from it.
		s.tooManyLocked(now)
		return throttled, max(s.cfg.RetryAfter, s.throttleEnd.Sub(now)), rec
	}
	from := s.senderLocked(rec.From)
	if from != nil && now.Before(from.throttleEnd) {
		from.rejected429++
		s.tooManyLocked(now)
		return throttledSender, max(s.cfg.RetryAfter, from.throttleEnd.Sub(now)), rec
	}
	if s.limit > 0 && !s.accountFitsLocked(now, rec.Units) {
		s.tooManyLocked(now)
		return throttled, s.cfg.RetryAfter, rec
	}
	if from != nil && !from.fits(now, rec.Units) {
		from.rejected429++
		s.tooManyLocked(now)
		return throttledSender, s.cfg.RetryAfter, rec
	}
	// Both limits passed: only now does the send count toward either.
	if s.limit > 0 {
		s.accountAddLocked(now, rec.Units)
	}
	if from != nil {
		from.add(now, rec.Units)
	} else if rec.From != "" {
		s.otherSends++
	}
	if id, ok := s.idem[rec.key]; ok && rec.key != "" && !s.cfg.NoIdempotency {
		// A retry of a send already accepted (the gateway lost the answer):
		// answered with the first id, never sent twice. It still used a
		// unit of the rate above: the provider counts requests.
		s.counters.replays++
		rec.ID = id
		return replayed, 0, rec
	}
	s.nextID++
	rec.At, rec.Elapsed = now, now.Sub(s.start)
	rec.ID = "sim-" + strconv.FormatUint(s.nextID, 10)
	if rec.key != "" {
		s.idem[rec.key] = rec.ID
	}
	if rec.Reference != "" {
		rec.Duplicate = s.refs[rec.Reference] > 0
		s.refs[rec.Reference]++
	}
	if p := s.rcpt.Load(); p != nil {
		rec.Receipt = p.cfg.statusFor()
	}
	s.records = append(s.records, rec)
	return accepted, 0, rec
}

// accountFitsLocked applies the account's window: whether units more
// stay within its limit. It counts nothing (accountAddLocked does).
func (s *Sim) accountFitsLocked(now time.Time, units int) bool {
	if s.cfg.Window == WindowFixed {
		n := now.UnixNano() - int64(s.cfg.Offset)
		idx := n / int64(time.Second)
		if n < 0 && n%int64(time.Second) != 0 {
			idx-- // floor, for instants before the epoch
		}
		if idx != s.fixedIdx {
			s.fixedIdx, s.fixedSum = idx, 0
		}
		return s.fixedSum+units <= s.limit
	}
	return s.recent.fits(now, units, s.limit)
}

// accountAddLocked counts an accept in the account's window, after
// accountFitsLocked said yes at the same now.
func (s *Sim) accountAddLocked(now time.Time, units int) {
	if s.cfg.Window == WindowFixed {
		s.fixedSum += units
		return
	}
	s.recent.add(now, units)
}

// tooManyLocked counts a 429 toward suspension and suspends the account when
// there are more than SuspendAfter in the rolling window.
func (s *Sim) tooManyLocked(now time.Time) {
	s.counters.rejected429++
	if s.cfg.SuspendAfter < 0 {
		return
	}
	drop := 0
	for drop < len(s.tooMany) && now.Sub(s.tooMany[drop]) >= s.cfg.SuspendWindow {
		drop++
	}
	s.tooMany = append(s.tooMany[drop:], now)
	if len(s.tooMany) > s.cfg.SuspendAfter {
		s.suspendEnd = now.Add(s.cfg.SuspendFor)
		s.counters.suspensions++
		s.tooMany = nil // the count starts again once the suspension lifts
		s.cfg.Logger.Warn("sim: account suspended", "after_429s", s.cfg.SuspendAfter+1,
			"within", s.cfg.SuspendWindow, "for", s.cfg.SuspendFor)
	}
}

// faultsNow returns the current faults.
func (s *Sim) faultsNow() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

func (s *Sim) count(f func(*counters)) {
	s.mu.Lock()
	f(&s.counters)
	s.mu.Unlock()
}

// wait sleeps d, or less if the client gives up or the sim closes; it
// reports whether the full time passed.
func (s *Sim) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return tick.Sleep(ctx, d)
}

// hang blocks until the client gives up or the sim closes.
func (s *Sim) hang(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-s.done:
	}
}

func roll(p float64) bool { return p > 0 && rand.Float64() < p }

func jitter(d Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(time.Duration(d))
}

// EnableReceipts starts posting receipts as r says, for a simulator
// created before the gateway's address was known (the demo). It fails
// when receipts are already on.
func (s *Sim) EnableReceipts(r Receipts) error {
	if err := r.validate(); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if len(r.URLs) == 0 {
		return errors.New("sim: receipts: no URL")
	}
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	select {
	case <-s.done:
		return errors.New("sim: closed")
	default:
	}
	if s.rcpt.Load() != nil {
		return errors.New("sim: receipts already enabled")
	}
	s.rcpt.Store(newPoster(r, s.done))
	return nil
}

// Start listens on addr (e.g. "127.0.0.1:0") and serves in the background.
// It returns the base URL; the send endpoint is URL()+"/send".
func (s *Sim) Start(addr string) (string, error) {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	if s.srv != nil {
		return "", errors.New("sim: already started")
	}
	// Binding a socket does not block; there is nothing to cancel.
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("sim: listen %s: %w", addr, err)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.serve = make(chan struct{})
	go func() {
		defer close(s.serve)
		_ = s.srv.Serve(ln) // returns ErrServerClosed on Close
	}()
	return s.url(), nil
}

func (s *Sim) url() string { return "http://" + s.ln.Addr().String() }

// URL returns the base URL of a started simulator ("" before Start).
func (s *Sim) URL() string {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.url()
}

// Close releases every hanging request and stops the server Start started.
func (s *Sim) Close() error {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	select {
	case <-s.done:
		return nil
	default:
		close(s.done)
	}
	if p := s.rcpt.Load(); p != nil {
		p.wg.Wait()
	}
	if s.srv == nil {
		return nil
	}
	err := s.srv.Close()
	<-s.serve
	if err != nil {
		return fmt.Errorf("sim: close: %w", err)
	}
	return nil
}
