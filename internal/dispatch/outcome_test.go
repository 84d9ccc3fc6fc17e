package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/provider/sim"
	"smsgw/internal/queue"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

// TestOutcomes drives one message per case through a real Redis queue, the
// real limiter and a provider (the simulator over HTTP, or a scripted fake),
// and compares what the queue stored with what the provider received.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	dur := func(d time.Duration) *sim.Duration { v := sim.Duration(d); return &v }
	cases := []struct {
		name    string
		sim     *sim.Control                                       // with the simulator: faults applied before the send
		script  []error                                            // without: the fake's answers in order (nil = accept)
		msg     func(m *sms.Message)                               // adjust the message
		cfg     func(c *Config)                                    // adjust the dispatcher
		want    sms.Status                                         //
		check   func(t *testing.T, m *sms.Message, calls []string) // more assertions
		simWant func(t *testing.T, st sim.Stats, m *sms.Message)
	}{{
		name: "sent",
		want: sms.StatusSent,
		check: func(t *testing.T, m *sms.Message, calls []string) {
			if m.Attempts != 1 || m.ProviderID == "" || m.Dead {
				t.Errorf("stored attempts=%d provider_id=%q dead=%v, want 1, an id, false", m.Attempts, m.ProviderID, m.Dead)
			}
		},
		simWant: func(t *testing.T, st sim.Stats, m *sms.Message) {
			if st.Accepted != 1 || st.Duplicates != 0 || st.Rejected429 != 0 {
				t.Errorf("sim accepted=%d duplicates=%d 429s=%d, want 1/0/0", st.Accepted, st.Duplicates, st.Rejected429)
			}
		},
	}, {
		// A 429 pauses everyone for Retry-After and requeues without an
		// attempt; the next try after the pause is accepted.
		name: "throttled then sent after the pause",
		sim:  &sim.Control{ThrottleAllFor: dur(time.Second)},
		want: sms.StatusSent,
		check: func(t *testing.T, m *sms.Message, calls []string) {
			if m.Attempts != 1 {
				t.Errorf("attempts %d, want 1 (a throttle spends none)", m.Attempts)
			}
			if len(calls) != 2 || calls[0] != m.ID || calls[1] != m.ID {
				t.Errorf("provider calls %v, want the same id twice", calls)
			}
			if gap := m.SentAt.Sub(m.CreatedAt); gap < 900*time.Millisecond {
				t.Errorf("sent %s after creation: the 1 s pause was not honoured", gap)
			}
		},
		simWant: func(t *testing.T, st sim.Stats, m *sms.Message) {
			if st.Rejected429 != 1 || st.Accepted != 1 {
				t.Errorf("sim 429s=%d accepted=%d, want exactly one 429 then one accept", st.Rejected429, st.Accepted)
			}
		},
	}, {
		name: "5xx until dead letter",
		sim:  &sim.Control{FailRate: ptr(1.0)},
		want: sms.StatusFailed,
		check: func(t *testing.T, m *sms.Message, calls []string) {
			if !m.Dead || m.Attempts != 3 {
				t.Errorf("dead=%v attempts=%d, want a dead letter after 3 attempts", m.Dead, m.Attempts)
			}
			for _, id := range calls {
				if id != m.ID {
					t.Errorf("a retry used id %s, want the message id %s (idempotency key)", id, m.ID)
				}
			}
		},
		simWant: func(t *testing.T, st sim.Stats, m *sms.Message) {
			if st.Failed5xx != 3 || st.Accepted != 0 {
				t.Errorf("sim 5xx=%d accepted=%d, want 3 and 0", st.Failed5xx, st.Accepted)
			}
		},
	}, {
		name:   "5xx twice then sent with the same id",
		script: []error{unavailableErr(), unavailableErr(), nil},
		want:   sms.StatusSent,
		check: func(t *testing.T, m *sms.Message, calls []string) {
			if m.Attempts != 3 || len(calls) != 3 {
				t.Errorf("attempts=%d calls=%d, want 3 and 3", m.Attempts, len(calls))
			}
			for _, id := range calls {
				if id != m.ID {
					t.Errorf("a retry used id %s, want %s", id, m.ID)
				}
			}
		},
	}, {
		name:   "permanent rejection fails at once",
		script: []error{rejectedErr()},
		want:   sms.StatusFailed,
		check: func(t *testing.T, m *sms.Message, calls []string) {
			if m.Dead || m.Attempts != 1 || len(calls) != 1 || !strings.Contains(m.LastError, "rejected") {
				t.Errorf("dead=%v attempts=%d calls=%d last_error=%q, want a failed message after one call", m.Dead, m.Attempts, len(calls), m.LastError)
			}
		},
	}, {
		// The recipient opted out at the provider: suppressed at once,
		// never retried, not a dead letter.
		name:   "opted out ends suppressed",
		script: []error{optedOutErr()},
		want:   sms.StatusSuppressed,
		check: func(t *testing.T, m *sms.Message, calls []string) {
			if m.Dead || m.Attempts != 1 || len(calls) != 1 || !strings.HasPrefix(m.LastError, "the recipient opted out at the provider: ") ||
				!strings.Contains(m.LastError, "21610") {
				t.Errorf("dead=%v attempts=%d calls=%d last_error=%q, want a suppressed message after one call", m.Dead, m.Attempts, len(calls), m.LastError)
			}
		},
	}, {
		name: "expired is never sent",
		msg:  func(m *sms.Message) { m.ExpiresAt = time.Now().Add(-time.Second) },
		want: sms.StatusExpired,
		check: func(t *testing.T, m *sms.Message, calls []string) {
			if len(calls) != 0 {
				t.Errorf("provider called %d times for an expired message", len(calls))
			}
		},
		simWant: func(t *testing.T, st sim.Stats, m *sms.Message) {
			if st.Accepted != 0 {
				t.Errorf("sim accepted %d, want 0", st.Accepted)
			}
		},
	}, {
		name: "cost beyond the burst fails with a reason",
		msg:  func(m *sms.Message) { m.Segments = 6 }, // burst is 5
		cfg:  func(c *Config) { c.CountSegments = true },
		want: sms.StatusFailed,
		check: func(t *testing.T, m *sms.Message, calls []string) {
			if len(calls) != 0 || !strings.Contains(m.LastError, "burst") || m.Dead {
				t.Errorf("calls=%d last_error=%q dead=%v, want no call and a reason naming the burst", len(calls), m.LastError, m.Dead)
			}
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			acct := newAccount(t)
			q := acct.queue(t, nil)
			var (
				p provider.Provider
				s *sim.Sim
			)
			if tc.script != nil {
				script := tc.script
				p = funcProvider(func(ctx context.Context, req *provider.Request) (provider.Result, error) {
					if len(script) == 0 {
						t.Errorf("provider called more often than scripted")
						return provider.Result{}, rejectedErr()
					}
					err := script[0]
					script = script[1:]
					if err != nil {
						return provider.Result{}, err
					}
					return provider.Result{ProviderID: "fake-" + req.ID}, nil
				})
			} else {
				var hp provider.Provider
				s, hp, _ = startSim(t, sim.Config{Limit: 100})
				if tc.sim != nil {
					if err := s.Apply(*tc.sim); err != nil {
						t.Fatal(err)
					}
				}
				p = hp
			}
			rec := newRecorder(p)
			cfg := Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: rec,
				MaxAttempts: 3, BackoffBase: 10 * time.Millisecond, BackoffMax: 40 * time.Millisecond, Workers: 1, OTPWorkers: 1}
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			m := newMsg(sms.ClassTransactional)
			if tc.msg != nil {
				tc.msg(m)
			}
			enqueue(t, q, m)
			d, _ := newDispatcher(t, cfg)
			got := waitTerminal(t, q, m.ID)[m.ID]
			if got.Status != tc.want {
				t.Fatalf("status %s (last error %q), want %s", got.Status, got.LastError, tc.want)
			}
			if tc.check != nil {
				tc.check(t, got, rec.calls())
			}
			if tc.simWant != nil {
				tc.simWant(t, s.Stats(), got)
			}
			st, err := q.Stats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for c, cs := range st {
				if cs.Ready+cs.Scheduled+cs.Leased != 0 {
					t.Errorf("class %s still holds %+v after a terminal outcome", c, cs)
				}
			}
			// Metrics count the outcome under the message's class.
			label := map[sms.Status]string{sms.StatusSent: outcomeSent, sms.StatusExpired: outcomeExpired, sms.StatusFailed: outcomeFailed,
				sms.StatusSuppressed: outcomeSuppressed}[tc.want]
			if got.Dead {
				label = outcomeDead
			}
			// The counter moves after the queue recorded the outcome: wait
			// for it, then check it moved exactly once.
			counter := d.m.outcomes.WithLabelValues("transactional", label)
			waitUntil(t, "smsgw_dispatch_messages_total{outcome="+label+"}", func() bool { return value(counter) >= 1 })
			if v := value(counter); v != 1 {
				t.Errorf("smsgw_dispatch_messages_total{outcome=%q} = %v, want 1", label, v)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// pauseRecorder is a limiter that records the shared pauses asked of it.
type pauseRecorder struct {
	limiter.Limiter
	mu     sync.Mutex
	pauses []time.Duration
}

func (p *pauseRecorder) Pause(_ context.Context, d time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pauses = append(p.pauses, d)
	return nil
}

// TestThrottlePauseCapped: while the suspension guard slows sends down, a
// throttle's pause is the vendor's Retry-After times the slowdown, but
// never more than the cap (provider.MaxRetryAfter, an hour) that a
// Retry-After itself gets.
func TestThrottlePauseCapped(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	rec := &pauseRecorder{Limiter: acct.limiter(t, nil, defaultLimits)}
	d, err := New(withRequired(Config{Queue: acct.queue(t, nil), Limiter: rec, Owner: "t", Logger: testLogger(),
		Provider: funcProvider(func(context.Context, *provider.Request) (provider.Result, error) { return provider.Result{}, nil })}))
	if err != nil {
		t.Fatal(err)
	}
	d.slowdown.Store(2)
	m := newMsg(sms.ClassTransactional)
	for _, tc := range []struct{ retryAfter, want time.Duration }{
		{10 * time.Second, 20 * time.Second},
		{45 * time.Minute, time.Hour},
		{time.Hour, time.Hour},
	} {
		got := d.throttled(context.Background(), &provider.Error{Reason: provider.ReasonThrottled, Temporary: true, RetryAfter: tc.retryAfter}, m)
		rec.mu.Lock()
		shared := rec.pauses[len(rec.pauses)-1]
		rec.mu.Unlock()
		if got != tc.want || shared != tc.want {
			t.Errorf("Retry-After %s at slowdown 2: paused %s (shared %s), want %s", tc.retryAfter, got, shared, tc.want)
		}
	}
}

// optOutRecorder is an OptOuts that records what it is told, and fails
// while fail is set.
type optOutRecorder struct {
	mu   sync.Mutex
	got  []string // to, why
	fail bool
}

func (o *optOutRecorder) ProviderOptOut(_ context.Context, to, why string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, to, why)
	if o.fail {
		return errors.New("suppression list down")
	}
	return nil
}

func (o *optOutRecorder) reports() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got)
}

// TestOptedOutReported: a send the provider refuses because the recipient
// opted out ends suppressed after one call, on the queued path, and the
// recipient's number (with the provider's text) goes to OptOuts before
// the outcome is recorded; the OTP fast path reports it too and answers
// the refusal. When OptOuts fails the message still ends suppressed and
// the failure is counted, the number never logged in clear.
func TestOptedOutReported(t *testing.T) {
	t.Parallel()
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "recorded", true: "list down"}[fail], func(t *testing.T) {
			t.Parallel()
			acct := newAccount(t)
			q := acct.queue(t, nil)
			rec := &optOutRecorder{fail: fail}
			var calls sync.Map
			p := funcProvider(func(_ context.Context, req *provider.Request) (provider.Result, error) {
				n, _ := calls.LoadOrStore(req.ID, new(int))
				*n.(*int)++
				return provider.Result{}, optedOutErr()
			})
			var logs strings.Builder
			var logMu sync.Mutex
			log := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
				logMu.Lock()
				defer logMu.Unlock()
				return logs.Write(b)
			}), &slog.HandlerOptions{Level: slog.LevelDebug}))
			d, _ := newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: p, OptOuts: rec,
				Logger: log, MaxAttempts: 3, BackoffBase: 10 * time.Millisecond, BackoffMax: 40 * time.Millisecond, Workers: 1, OTPWorkers: 1})
			m := newMsg(sms.ClassMarketing)
			enqueue(t, q, m)
			got := waitTerminal(t, q, m.ID)[m.ID]
			if got.Status != sms.StatusSuppressed || got.Attempts != 1 || got.Dead {
				t.Fatalf("stored %+v, want suppressed after one attempt", got)
			}
			if n, _ := calls.Load(m.ID); *n.(*int) != 1 {
				t.Errorf("provider called %d times, want 1", *n.(*int))
			}
			if r := rec.reports(); len(r) != 2 || r[0] != m.To || !strings.Contains(r[1], "21610") {
				t.Fatalf("reported %q, want the recipient and the provider's text", r)
			}
			otp := newMsg(sms.ClassOTP)
			_, err := d.SendNow(t.Context(), otp, time.Second)
			if pe := provider.AsError(err); pe == nil || pe.Reason != provider.ReasonOptedOut {
				t.Fatalf("SendNow = %v, want the opt-out refusal", err)
			}
			if r := rec.reports(); len(r) != 4 || r[2] != otp.To {
				t.Fatalf("reported %q after the fast path", r)
			}
			counter := d.m.outcomes.WithLabelValues("marketing", outcomeSuppressed)
			waitUntil(t, "the suppressed outcome counted", func() bool { return value(counter) == 1 })
			if got, want := value(d.m.loopErrors.WithLabelValues("opt_out")), map[bool]float64{false: 0, true: 2}[fail]; got != want {
				t.Errorf("opt_out loop errors %v, want %v", got, want)
			}
			if s := d.Snapshot().Classes[sms.ClassMarketing]; s.Failed != 1 {
				t.Errorf("snapshot failed %d, want the suppressed message counted as a permanent failure", s.Failed)
			}
			logMu.Lock()
			defer logMu.Unlock()
			if strings.Contains(logs.String(), m.To[3:]) || !strings.Contains(logs.String(), "recipient opted out") {
				t.Errorf("logs show the number, or not the opt-out:\n%s", logs.String())
			}
		})
	}
}

// writerFunc is an io.Writer.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// outcomeRow is one provider answer and what both send paths must do with
// it: the effects every replica sees are the same whichever path sent.
type outcomeRow struct {
	name   string
	answer error         // the provider's answer (nil: accepted)
	result string        // smsgw_dispatch_send_duration_seconds{result}
	pause  time.Duration // every replica paused this long (0: none)
	guard  int           // 429s the suspension guard recorded
	// Queued path: the message's fate in the queue.
	status   sms.Status
	attempts int
	label    string // smsgw_dispatch_messages_total{outcome}
	requeue  string // smsgw_dispatch_requeues_total{reason}; "" when not requeued
	// Fast path: what SendNow returns.
	noSlot   string // NoSlotError.Reason; "" when not a NoSlotError
	is       error  // errors.Is target; nil when none
	rejected bool   // the provider's permanent rejection, wrapped
	now      string // smsgw_dispatch_send_now_total{result}
}

func outcomeRows() []outcomeRow {
	perr := func(r provider.Reason, temporary bool, status int, retryAfter time.Duration) error {
		return &provider.Error{Reason: r, Temporary: temporary, Status: status, RetryAfter: retryAfter, Message: "injected"}
	}
	queuedRetry := func(r outcomeRow) outcomeRow {
		r.status, r.attempts, r.label, r.requeue = sms.StatusQueued, 1, outcomeRequeued, requeueRetry
		return r
	}
	return []outcomeRow{
		{name: "sent", result: sendOK,
			status: sms.StatusSent, attempts: 1, label: outcomeSent, now: nowSent},
		{name: "throttled", answer: perr(provider.ReasonThrottled, true, 429, 20*time.Second), result: "throttled",
			pause: 20 * time.Second, guard: 1,
			status: sms.StatusQueued, label: outcomeRequeued, requeue: requeueThrottled, noSlot: noSlotThrottled, now: nowNoSlot},
		{name: "suspended", answer: perr(provider.ReasonSuspended, true, 403, 30*time.Second), result: "suspended",
			pause:  30 * time.Second,
			status: sms.StatusQueued, label: outcomeRequeued, requeue: requeueThrottled, noSlot: noSlotThrottled, now: nowNoSlot},
		{name: "auth", answer: perr(provider.ReasonAuth, false, 401, 0), result: "auth",
			pause:  AuthPause,
			status: sms.StatusQueued, label: outcomeRequeued, requeue: requeueAuth, noSlot: noSlotAuth, now: nowNoSlot},
		// A 5xx or a connection lost after the request was written may
		// have reached the provider: the fast path's caller is told the
		// outcome is unknown (and retries under the same id); only a
		// failed dial is known not to have.
		queuedRetry(outcomeRow{name: "transient 5xx", answer: perr(provider.ReasonUnavailable, true, 503, 0), result: "unavailable",
			is: ErrOutcomeUnknown, now: nowUnknown}),
		queuedRetry(outcomeRow{name: "network", answer: perr(provider.ReasonNetwork, true, 0, 0), result: "network",
			is: ErrOutcomeUnknown, now: nowUnknown}),
		queuedRetry(outcomeRow{name: "network, not sent", answer: &provider.Error{Reason: provider.ReasonNetwork, Temporary: true,
			NotSent: true, Message: "injected: connection refused"}, result: "network",
			is: ErrUnavailable, now: nowUnavailable}),
		queuedRetry(outcomeRow{name: "unknown timeout", answer: perr(provider.ReasonTimeout, true, 0, 0), result: "timeout",
			is: ErrOutcomeUnknown, now: nowUnknown}),
		queuedRetry(outcomeRow{name: "bad_response", answer: perr(provider.ReasonBadResponse, true, 200, 0), result: "bad_response",
			is: ErrOutcomeUnknown, now: nowUnknown}),
		queuedRetry(outcomeRow{name: "unclassified", answer: errors.New("injected: unclassified"), result: sendOther,
			is: ErrOutcomeUnknown, now: nowUnknown}),
		{name: "permanent rejected", answer: rejectedErr(), result: "rejected",
			status: sms.StatusFailed, attempts: 1, label: outcomeFailed, rejected: true, now: nowFailed},
		// The vendor's queue for our sender is full (Twilio 21611): a long
		// pause for everyone, not a 429 of the suspension rule.
		{name: "queue full", answer: perr(provider.ReasonQueueFull, true, 400, 10*time.Minute), result: "queue_full",
			pause:  10 * time.Minute,
			status: sms.StatusQueued, label: outcomeRequeued, requeue: requeueThrottled, noSlot: noSlotThrottled, now: nowNoSlot},
		// The account's sender or id refused: every message would fail
		// alike, so it is handled like refused credentials.
		{name: "account setup", answer: perr(provider.ReasonSetup, false, 400, 0), result: "setup",
			pause:  AuthPause,
			status: sms.StatusQueued, label: outcomeRequeued, requeue: requeueAuth, noSlot: noSlotAuth, now: nowNoSlot},
		// Part 1 accepted, part 2 throttled: failed and never sent again
		// (part 1 would arrive twice), and the throttle pauses everyone.
		{name: "partly accepted, then throttled", answer: partial(provider.ReasonThrottled, 5*time.Second), result: "partial",
			pause: 5 * time.Second, guard: 1,
			status: sms.StatusFailed, attempts: 1, label: outcomeFailed, rejected: true, now: nowFailed},
		{name: "partly accepted, then rejected", answer: partial(provider.ReasonRejected, 0), result: "partial",
			status: sms.StatusFailed, attempts: 1, label: outcomeFailed, rejected: true, now: nowFailed},
	}
}

// partial is a multipart answer whose first part was accepted and whose
// second was refused for reason.
func partial(reason provider.Reason, retryAfter time.Duration) error {
	return &provider.Error{Reason: provider.ReasonPartial, Status: 200, RetryAfter: retryAfter, Message: "injected",
		Accepted: []string{"part-1"}, PartReason: reason}
}

// pathRig is one send path's world: its own account on the real Redis
// (queue and shared limiter), an in-memory suspension guard and a provider
// that gives one scripted answer.
type pathRig struct {
	q     queue.Queue
	lim   limiter.Limiter
	guard Guard
	calls atomic.Int64
	p     funcProvider
}

func newPathRig(t *testing.T, answer error) *pathRig {
	t.Helper()
	acct := newAccount(t)
	g := localGuard(t, GuardConfig{})
	r := &pathRig{q: acct.queue(t, nil), lim: acct.limiter(t, nil, limiterConfig(100, 5)), guard: g}
	r.p = func(_ context.Context, req *provider.Request) (provider.Result, error) {
		r.calls.Add(1)
		if answer != nil {
			return provider.Result{}, answer
		}
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	}
	return r
}

// config is the rig's dispatcher configuration. Retries back off up to an
// hour, so that the message is still waiting when the test looks at it.
func (r *pathRig) config() Config {
	return Config{Queue: r.q, Limiter: r.lim, Provider: r.p, Guard: r.guard, Owner: "test",
		Workers: 1, OTPWorkers: 1, Lease: 30 * time.Second, MaxAttempts: 5,
		BackoffBase: time.Hour, BackoffMax: time.Hour}
}

// TestOutcomeOnBothPaths sends one OTP per provider answer through the
// queued path (a real queue, started dispatcher) and through the fast path
// (SendNow), and asserts the same effects on both: the pause every replica
// obeys (in the shared limiter) and this process's own, the guard's count,
// the send metrics; then the message's fate on each path.
func TestOutcomeOnBothPaths(t *testing.T) {
	t.Parallel()
	for _, row := range outcomeRows() {
		t.Run(row.name+"/queued", func(t *testing.T) {
			t.Parallel()
			r := newPathRig(t, row.answer)
			m := newMsg(sms.ClassOTP)
			enqueue(t, r.q, m)
			d, _ := newDispatcher(t, r.config())
			waitUntil(t, "the outcome "+row.label, func() bool {
				return value(d.m.outcomes.WithLabelValues("otp", row.label)) == 1
			})
			assertEffects(t, d, r, row)
			got, err := r.q.Get(context.Background(), m.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != row.status || got.Attempts != row.attempts || got.Dead {
				t.Errorf("stored status=%s attempts=%d dead=%v, want %s, %d, false", got.Status, got.Attempts, got.Dead, row.status, row.attempts)
			}
			if pe := provider.AsError(row.answer); pe != nil && pe.Reason == provider.ReasonPartial && got.ProviderID != "part-1" {
				t.Errorf("stored provider id %q, want the accepted part's", got.ProviderID)
			}
			if row.pause > 0 && row.status == sms.StatusQueued {
				if wait := time.Until(got.NotBefore); wait < row.pause-5*time.Second || wait > row.pause {
					t.Errorf("requeued %s ahead, want the pause %s", wait, row.pause)
				}
			}
			if row.requeue != "" {
				if v := value(d.m.requeues.WithLabelValues("otp", row.requeue)); v != 1 {
					t.Errorf("smsgw_dispatch_requeues_total{reason=%q} = %v, want 1", row.requeue, v)
				}
			}
		})
		t.Run(row.name+"/fast", func(t *testing.T) {
			t.Parallel()
			r := newPathRig(t, row.answer)
			cfg := r.config()
			cfg.Logger, cfg.Registerer = testLogger(), nil
			d, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			m := newMsg(sms.ClassOTP)
			res, err := d.SendNow(context.Background(), m, time.Second)
			assertEffects(t, d, r, row)
			assertFastAnswer(t, row, res, err)
			if v := value(d.m.sendNow.WithLabelValues(row.now)); v != 1 {
				t.Errorf("smsgw_dispatch_send_now_total{result=%q} = %v, want 1", row.now, v)
			}
			assertNothingQueued(t, d)
		})
	}
}

// assertEffects checks what one answer did beyond the message: the pauses,
// the guard, the metrics. Both paths must pass it alike.
func assertEffects(t *testing.T, d *Dispatcher, r *pathRig, row outcomeRow) {
	t.Helper()
	ctx := context.Background()
	if n := r.calls.Load(); n != 1 {
		t.Errorf("provider called %d times, want 1", n)
	}
	st, err := r.lim.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	assertPause(t, "shared limiter pause", st.PauseRemaining, row.pause)
	assertPause(t, "this process's pause", d.pauseLeft(), row.pause)
	if n, err := r.guard.Count(ctx); err != nil || n != row.guard {
		t.Errorf("guard count %d (%v), want %d", n, err, row.guard)
	}
	if v := value(d.m.guardCount); int(v) != row.guard {
		t.Errorf("smsgw_dispatch_suspension_guard_throttles = %v, want %d", v, row.guard)
	}
	if v := value(d.m.throttles); int(v) != row.guard {
		t.Errorf("smsgw_dispatch_provider_throttles_total = %v, want %d", v, row.guard)
	}
	if v := histCount(d.m.sendDuration.WithLabelValues(row.result).(prometheus.Metric)); v != 1 {
		t.Errorf("smsgw_dispatch_send_duration_seconds{result=%q} count = %v, want 1", row.result, v)
	}
	if v := value(d.m.loopErrors.WithLabelValues("pause")) + value(d.m.loopErrors.WithLabelValues("guard")); v != 0 {
		t.Errorf("pause or guard errors counted: %v", v)
	}
}

// assertPause: a pause of want, measured a little later (0: no pause).
func assertPause(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if want == 0 && got != 0 || want > 0 && (got < want-5*time.Second || got > want) {
		t.Errorf("%s %s, want %s", what, got, want)
	}
}

func assertFastAnswer(t *testing.T, row outcomeRow, res SendNowResult, err error) {
	t.Helper()
	var ns NoSlotError
	isNoSlot := errors.As(err, &ns)
	pe := provider.AsError(err)
	switch {
	case row.answer == nil:
		if err != nil || res.ProviderID == "" {
			t.Errorf("SendNow = %+v, %v; want sent with a provider id", res, err)
		}
	case row.noSlot != "":
		if !isNoSlot || ns.Reason != row.noSlot {
			t.Fatalf("SendNow = %v, want NoSlotError{%s}", err, row.noSlot)
		}
		assertPause(t, "RetryAfter", ns.RetryAfter, row.pause)
	case row.is != nil:
		if !errors.Is(err, row.is) || isNoSlot {
			t.Errorf("SendNow = %v, want %v", err, row.is)
		}
	case row.rejected:
		if pe == nil || pe.Temporary || isNoSlot || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("SendNow = %v, want the provider's permanent rejection", err)
		}
	}
}

// TestRecord429FailureCountedOnBothPaths: a suspension guard that cannot
// record a 429 (its Redis client is closed) is counted and logged on both
// paths, and the pause lands anyway.
func TestRecord429FailureCountedOnBothPaths(t *testing.T) {
	t.Parallel()
	throttled := &provider.Error{Reason: provider.ReasonThrottled, Temporary: true, Status: 429, RetryAfter: 20 * time.Second}
	broken := func(t *testing.T) Guard {
		c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
		_ = c.Close()
		return account{name: redistest.Prefix(t), client: c}.guard(t, c, GuardConfig{})
	}
	check := func(t *testing.T, d *Dispatcher, lim limiter.Limiter) {
		t.Helper()
		if v := value(d.m.loopErrors.WithLabelValues("guard")); v != 1 {
			t.Errorf("smsgw_dispatch_loop_errors_total{step=guard} = %v, want 1", v)
		}
		if v := value(d.m.throttles); v != 1 {
			t.Errorf("smsgw_dispatch_provider_throttles_total = %v, want 1", v)
		}
		st, err := lim.State(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		assertPause(t, "shared limiter pause", st.PauseRemaining, 20*time.Second)
	}
	t.Run("queued", func(t *testing.T) {
		t.Parallel()
		r := newPathRig(t, throttled)
		cfg := r.config()
		cfg.Guard, cfg.GuardRefresh = broken(t), time.Hour // only the 429 touches the guard
		enqueue(t, r.q, newMsg(sms.ClassOTP))
		d, _ := newDispatcher(t, cfg)
		waitUntil(t, "the requeue", func() bool { return value(d.m.outcomes.WithLabelValues("otp", outcomeRequeued)) == 1 })
		check(t, d, r.lim)
	})
	t.Run("fast", func(t *testing.T) {
		t.Parallel()
		r := newPathRig(t, throttled)
		cfg := r.config()
		cfg.Guard, cfg.Logger = broken(t), testLogger()
		d, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = d.SendNow(context.Background(), newMsg(sms.ClassOTP), time.Second)
		var ns NoSlotError
		if !errors.As(err, &ns) || ns.Reason != noSlotThrottled {
			t.Errorf("SendNow = %v, want NoSlotError{throttled}", err)
		}
		check(t, d, r.lim)
	})
}

// TestReceiptForEarlierAttemptNotResent: the provider has a message whose
// send timed out (outcome unknown) and its receipt arrives before the
// retry. The retry's take hands the receipt out with the lease, and the
// message is stored as delivered without a second provider call.
func TestReceiptForEarlierAttemptNotResent(t *testing.T) {
	acct := newAccount(t)
	q := acct.queue(t, nil)
	calls := make(chan string, 16)
	prov := newRecorder(funcProvider(func(ctx context.Context, req *provider.Request) (provider.Result, error) {
		calls <- req.ID
		// the provider took it and its receipt is on its way while our
		// call ends without an answer
		if _, err := q.ApplyReceipt(context.Background(), queue.Receipt{Reference: req.ID, Status: sms.StatusDelivered}); err != nil {
			t.Errorf("ApplyReceipt: %v", err)
		}
		return provider.Result{}, &provider.Error{Reason: provider.ReasonTimeout, Temporary: true, Message: "injected: no answer"}
	}))
	m := newMsg(sms.ClassTransactional)
	enqueue(t, q, m)
	newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: prov,
		Workers: 2, BackoffBase: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond})
	got := waitTerminal(t, q, m.ID)[m.ID]
	if got.Status != sms.StatusDelivered || got.Attempts != 1 || got.SentAt.IsZero() {
		t.Errorf("stored %s after %d attempts (sent at %v); want delivered after 1", got.Status, got.Attempts, got.SentAt)
	}
	if n := len(prov.calls()); n != 1 {
		t.Errorf("the provider was called %d times for a message it had; want 1", n)
	}
}

// The provider is told what is left of a queued message's TTL, on the
// dispatcher's clock, so a vendor drops what it could only deliver late;
// a message without a TTL, and the fast path, give no limit.
func TestProviderGetsTheRemainingTTL(t *testing.T) {
	t.Parallel()
	clock := time.Now()
	got := make(chan time.Duration, 4)
	prov := funcProvider(func(ctx context.Context, req *provider.Request) (provider.Result, error) {
		got <- req.Validity
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	})
	a := newAccount(t)
	q := a.queue(t, nil)
	m := newMsg(sms.ClassTransactional)
	m.ExpiresAt = clock.Add(10 * time.Minute)
	enqueue(t, q, m)
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: a.limiter(t, nil, defaultLimits), Provider: prov,
		Now: func() time.Time { return clock }})
	// The store keeps times to the millisecond.
	if v := <-got; v < 10*time.Minute-time.Millisecond || v > 10*time.Minute {
		t.Errorf("queued with a TTL: validity %v, want 10m (what is left of it)", v)
	}
	enqueue(t, q, newMsg(sms.ClassTransactional))
	if v := <-got; v != 0 {
		t.Errorf("queued without a TTL: validity %v, want none", v)
	}
	otp := newMsg(sms.ClassOTP)
	otp.ExpiresAt = clock.Add(time.Second)
	if _, err := d.SendNow(context.Background(), otp, time.Second); err != nil {
		t.Fatal(err)
	}
	if v := <-got; v != 0 {
		t.Errorf("fast path: validity %v, want none (its deadline bounds our attempt only)", v)
	}
}
