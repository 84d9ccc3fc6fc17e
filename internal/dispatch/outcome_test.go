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
	"smsgw/internal/queue/embedded"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
	"smsgw/internal/state"
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
	// Every replica paused: the message goes back with no attempt spent
	// and the fast path has no slot.
	paused := func(r outcomeRow, requeue, noSlot string) outcomeRow {
		r.status, r.label, r.requeue, r.noSlot, r.now = sms.StatusQueued, outcomeRequeued, requeue, noSlot, nowNoSlot
		return r
	}
	return []outcomeRow{
		{name: "sent", result: sendOK,
			status: sms.StatusSent, attempts: 1, label: outcomeSent, now: nowSent},
		paused(outcomeRow{name: "throttled", answer: perr(provider.ReasonThrottled, true, 429, 20*time.Second), result: "throttled",
			pause: 20 * time.Second, guard: 1}, requeueThrottled, noSlotThrottled),
		paused(outcomeRow{name: "suspended", answer: perr(provider.ReasonSuspended, true, 403, 30*time.Second), result: "suspended",
			pause: 30 * time.Second}, requeueThrottled, noSlotThrottled),
		paused(outcomeRow{name: "auth", answer: perr(provider.ReasonAuth, false, 401, 0), result: "auth",
			pause: AuthPause}, requeueAuth, noSlotAuth),
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
		paused(outcomeRow{name: "queue full", answer: perr(provider.ReasonQueueFull, true, 400, 10*time.Minute), result: "queue_full",
			pause: 10 * time.Minute}, requeueThrottled, noSlotThrottled),
		// The account's sender or id refused: every message would fail
		// alike, so it is handled like refused credentials.
		paused(outcomeRow{name: "account setup", answer: perr(provider.ReasonSetup, false, 400, 0), result: "setup",
			pause: AuthPause}, requeueAuth, noSlotAuth),
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

// reservedUnits is a limiter that adds up the units asked for.
type reservedUnits struct {
	limiter.Limiter
	units atomic.Int64
}

func (r *reservedUnits) Reserve(ctx context.Context, req limiter.Request) (limiter.Decision, error) {
	r.units.Add(int64(req.Cost))
	return r.Limiter.Reserve(ctx, req)
}

// TestListedNotSent: messages queued before their number was put on the
// suppression list, on both queues (Redis, with the list's HASH read in
// the take script; embedded, with the list's own bbolt file asked in the
// take transaction), the way the gateway wires them. When their turn
// comes the transactional and marketing ones end suppressed without a
// provider call, a reservation of rate or an attempt, and are counted
// with outcome suppressed (and in the snapshot's failures); a message of
// the same batch to another number is sent, and so is an OTP to the
// listed number (protection.suppress_otp off). The log names the message,
// never the number or its id.
func TestListedNotSent(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"redis", "embedded"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			q, lim, list, s := listedBackend(t, backend)
			listed, other := "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
			mk := func(c sms.Class, id string) *sms.Message {
				m := newMsg(c)
				m.NumberID = id
				return m
			}
			marketing, transactional := mk(sms.ClassMarketing, listed), mk(sms.ClassTransactional, listed)
			sendable, otp := mk(sms.ClassMarketing, other), mk(sms.ClassOTP, listed)
			enqueue(t, q, marketing, sendable, transactional, otp)
			// The recipient opts out after the messages were accepted.
			if _, err := list.Add(t.Context(), state.Suppression{ID: listed, Masked: "+8190****5678", Source: state.SourceRecipient}); err != nil {
				t.Fatal(err)
			}

			rec := acceptingRecorder()
			units := &reservedUnits{Limiter: lim}
			var logs strings.Builder
			var logMu sync.Mutex
			d, _ := newDispatcher(t, Config{Queue: q, Limiter: units, Provider: rec, Suppression: s, Workers: 2, OTPWorkers: 1,
				Logger: lockedLogger(&logs, &logMu)})

			got := waitTerminal(t, q, marketing.ID, transactional.ID, sendable.ID, otp.ID)
			for _, m := range []*sms.Message{marketing, transactional} {
				g := got[m.ID]
				if g.Status != sms.StatusSuppressed || g.LastError != queue.ListedReason || g.Attempts != 0 || g.Dead || g.ProviderID != "" {
					t.Errorf("%s message to a listed number: %+v; want suppressed, no attempt", m.Class, g)
				}
			}
			for _, m := range []*sms.Message{sendable, otp} {
				if g := got[m.ID]; g.Status != sms.StatusSent || g.Attempts != 1 {
					t.Errorf("%s message: %s after %d attempts, want sent", m.Class, g.Status, g.Attempts)
				}
			}
			calls := rec.calls()
			slices.Sort(calls)
			want := []string{sendable.ID, otp.ID}
			slices.Sort(want)
			if !slices.Equal(calls, want) {
				t.Errorf("provider calls %v, want only %v", calls, want)
			}
			if n := units.units.Load(); n != 2 {
				t.Errorf("%d units of rate reserved, want 2 (the sent ones only)", n)
			}
			for cls, want := range map[string]float64{"marketing": 1, "transactional": 1, "otp": 0} {
				counter := d.m.outcomes.WithLabelValues(cls, outcomeSuppressed)
				waitUntil(t, cls+" suppressed counted", func() bool { return value(counter) == want })
			}
			// The outcome is counted once the queue has stored it.
			sentCounter := d.m.outcomes.WithLabelValues("marketing", outcomeSent)
			waitUntil(t, "marketing sent counted", func() bool { return value(sentCounter) == 1 })
			if s := d.Snapshot().Classes[sms.ClassTransactional]; s.Failed != 1 || s.Sent != 0 {
				t.Errorf("snapshot %+v, want the suppressed message among the failures", s)
			}
			logMu.Lock()
			defer logMu.Unlock()
			out := logs.String()
			if !strings.Contains(out, "suppression list") || !strings.Contains(out, marketing.ID) ||
				strings.Contains(out, listed) || strings.Contains(out, "9012345678") {
				t.Errorf("logs do not name the message, or show the number or its id:\n%s", out)
			}
		})
	}
}

// listedBackend is a queue, a limiter and the suppression list of one
// backend, the way the gateway wires them: Redis (the list's HASH read in
// the take script) or embedded (the list's own bbolt file asked in the
// take transaction).
func listedBackend(t *testing.T, backend string) (queue.Queue, limiter.Limiter, state.Suppressions, queue.Suppression) {
	t.Helper()
	if backend == "redis" {
		acct := newAccount(t)
		return acct.queue(t, nil), acct.limiter(t, nil, defaultLimits), acct.suppressions(t), acct.suppression(t)
	}
	dir := t.TempDir()
	eq, err := embedded.Open(embedded.Config{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eq.Close() })
	ll, err := state.OpenLocalSuppressions(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ll.Close() })
	l, err := limiter.NewLocal(defaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	return eq, l, ll, queue.Suppression{Listed: ll.Contains}
}

// pauseSwitch is a limiter that answers Paused (as the operator pause
// does) while on, and counts the decisions it gave.
type pauseSwitch struct {
	limiter.Limiter
	on     atomic.Bool
	denied atomic.Int64
}

func (p *pauseSwitch) Reserve(ctx context.Context, req limiter.Request) (limiter.Decision, error) {
	if p.on.Load() {
		p.denied.Add(1)
		return limiter.Decision{RetryAfter: 20 * time.Millisecond, Paused: true}, nil
	}
	return p.Limiter.Reserve(ctx, req)
}

// TestHeldThroughPauseRechecked: a pacer holds the messages it took while
// sending is paused (each denial is shorter than HoldMax), for as long as
// the pause lasts. A number suppressed during the pause must still not be
// sent to: when the pause lifts, the held batch goes back to its place in
// line (requeue reason after_pause, no attempt) and is taken again, and
// the take ends the listed message; the other is sent, first in line.
func TestHeldThroughPauseRechecked(t *testing.T) {
	t.Parallel()
	heldThroughPauseRechecked(t, func(lim limiter.Limiter) (limiter.Limiter, *pauseSwitch) {
		p := &pauseSwitch{Limiter: lim}
		return p, p
	})
}

// heldThroughPauseRechecked runs TestHeldThroughPauseRechecked on both
// backends with the limiter wrap makes of the backend's: the limiter the
// pacer reserves with and the switch that pauses it.
func heldThroughPauseRechecked(t *testing.T, wrap func(limiter.Limiter) (limiter.Limiter, *pauseSwitch)) {
	for _, backend := range []string{"redis", "embedded"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			q, lim, list, s := listedBackend(t, backend)
			reserver, paused := wrap(lim)
			paused.on.Store(true)
			rec := acceptingRecorder()
			d, _ := newDispatcher(t, Config{Queue: q, Limiter: reserver, Provider: rec, Suppression: s, Workers: 4})
			listed := "0123456789abcdef0123456789abcdef"
			a, b := newMsg(sms.ClassMarketing), newMsg(sms.ClassMarketing)
			a.NumberID, b.NumberID = listed, "fedcba9876543210fedcba9876543210"
			enqueue(t, q, a, b)
			waitUntil(t, "the batch held by the pause", func() bool {
				st, err := q.Stats(t.Context())
				return err == nil && st[sms.ClassMarketing].Leased == 2 && paused.denied.Load() >= 3
			})
			if _, err := list.Add(t.Context(), state.Suppression{ID: listed, Masked: "+8190****5678", Source: state.SourceOperator}); err != nil {
				t.Fatal(err)
			}
			paused.on.Store(false)
			got := waitTerminal(t, q, a.ID, b.ID)
			if g := got[a.ID]; g.Status != sms.StatusSuppressed || g.LastError != queue.ListedReason || g.Attempts != 0 {
				t.Errorf("the listed message: %s after %d attempts (%q); want suppressed, never sent", g.Status, g.Attempts, g.LastError)
			}
			if g := got[b.ID]; g.Status != sms.StatusSent || g.Attempts != 1 {
				t.Errorf("the other message: %s after %d attempts, want sent", g.Status, g.Attempts)
			}
			if calls := rec.calls(); !slices.Equal(calls, []string{b.ID}) {
				t.Errorf("provider calls %v, want only %s", calls, b.ID)
			}
			if v := value(d.m.requeues.WithLabelValues("marketing", requeueAfterPause)); v != 2 {
				t.Errorf("after_pause requeues %v, want the 2 held", v)
			}
		})
	}
}

// acceptingRecorder is a provider that accepts every message (provider id
// "p-" and the message's id) and records the calls.
func acceptingRecorder() *recorder {
	return newRecorder(funcProvider(func(_ context.Context, req *provider.Request) (provider.Result, error) {
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	}))
}

// lockedLogger logs text at debug level into b under mu.
func lockedLogger(b *strings.Builder, mu *sync.Mutex) *slog.Logger {
	return slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return b.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// shrunkAfterPause is pauseSwitch whose burst, once the pause lifts, no
// longer takes more than one unit (the limiter fell back to a smaller
// burst while the pause lasted): a batch held through the pause is then
// too big for it and is reserved message by message.
type shrunkAfterPause struct{ pauseSwitch }

func (p *shrunkAfterPause) Reserve(ctx context.Context, req limiter.Request) (limiter.Decision, error) {
	if !p.on.Load() && req.Cost > 1 {
		return limiter.Decision{}, limiter.ErrCostExceedsBurst
	}
	return p.pauseSwitch.Reserve(ctx, req)
}

// TestHeldThroughPauseSplitRechecked: a batch held through an operator
// pause goes back to its place and is taken again on its grant
// (TestHeldThroughPauseRechecked) on every path out of the hold, also
// when the first reservation after the pause finds the batch too big for
// the burst and the pacer would reserve its messages one by one: a number
// suppressed during the pause is not sent to.
func TestHeldThroughPauseSplitRechecked(t *testing.T) {
	t.Parallel()
	heldThroughPauseRechecked(t, func(lim limiter.Limiter) (limiter.Limiter, *pauseSwitch) {
		p := &shrunkAfterPause{pauseSwitch{Limiter: lim}}
		return p, &p.pauseSwitch
	})
}

// TestListedEndedLogSampled: a backlog to one suppressed number ends one
// message after another; the INFO line comes once per listedLogEvery with
// how many it stands for, every message at DEBUG, and the counter counts
// each.
func TestListedEndedLogSampled(t *testing.T) {
	var logs strings.Builder
	var logMu sync.Mutex
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	d := &Dispatcher{log: lockedLogger(&logs, &logMu), m: m}
	for range 5 {
		d.listedEnded(newMsg(sms.ClassMarketing))
	}
	if v := value(m.outcomes.WithLabelValues("marketing", outcomeSuppressed)); v != 5 {
		t.Errorf("suppressed counted %v, want 5", v)
	}
	logMu.Lock()
	out := logs.String()
	logMu.Unlock()
	if n := strings.Count(out, "level=INFO"); n != 1 || !strings.Contains(out, "messages=1") {
		t.Errorf("%d INFO lines, want the first one only (messages=1):\n%s", n, out)
	}
	if n := strings.Count(out, "level=DEBUG"); n != 4 {
		t.Errorf("%d DEBUG lines, want the other 4:\n%s", n, out)
	}
}

// TestSnapshotCountsOutcomes drives messages to every outcome through a real
// Redis queue and limiter, and the fast path both ways, then compares the
// Snapshot with what happened.
func TestSnapshotCountsOutcomes(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	q := acct.queue(t, nil)
	guard := localGuard(t, GuardConfig{Threshold: 10})
	var mu sync.Mutex
	throttledOnce := map[string]bool{}
	p := funcProvider(func(ctx context.Context, req *provider.Request) (provider.Result, error) {
		switch {
		case strings.HasPrefix(req.Body, "reject"):
			return provider.Result{}, rejectedErr()
		case strings.HasPrefix(req.Body, "down"):
			return provider.Result{}, unavailableErr()
		case strings.HasPrefix(req.Body, "throttle"):
			mu.Lock()
			defer mu.Unlock()
			if !throttledOnce[req.ID] {
				throttledOnce[req.ID] = true
				return provider.Result{}, &provider.Error{Reason: provider.ReasonThrottled, Temporary: true, RetryAfter: 100 * time.Millisecond, Status: 429}
			}
		}
		return provider.Result{ProviderID: "p-" + req.ID}, nil
	})
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: acct.limiter(t, nil, defaultLimits), Provider: p, Guard: guard,
		MaxAttempts: 1, BackoffBase: time.Millisecond})
	if got := d.Snapshot(); got.Classes[sms.ClassMarketing] != (ClassCounts{}) || got.Throttled != 0 || got.GuardActivateAt != 5 {
		t.Fatalf("fresh snapshot %+v, want zeros and activate_at 5", got)
	}

	mk := func(c sms.Class, body string) *sms.Message {
		m := newMsg(c)
		m.Body = body + " " + m.Body
		return m
	}
	expired := mk(sms.ClassMarketing, "ok")
	expired.ExpiresAt = time.Now().Add(-time.Second)
	ms := []*sms.Message{
		mk(sms.ClassTransactional, "ok"), mk(sms.ClassTransactional, "ok"), mk(sms.ClassTransactional, "reject"),
		mk(sms.ClassMarketing, "down"), mk(sms.ClassMarketing, "throttle"), expired, mk(sms.ClassOTP, "ok"),
	}
	enqueue(t, q, ms...)
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	waitTerminal(t, q, ids...)

	if _, err := d.SendNow(t.Context(), mk(sms.ClassOTP, "ok"), time.Second); err != nil {
		t.Fatalf("SendNow: %v", err)
	}
	if _, err := d.SendNow(t.Context(), mk(sms.ClassOTP, "down"), time.Second); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("SendNow to a provider answering 5xx: %v, want ErrOutcomeUnknown", err)
	}

	// Acks are counted after the queue answered; wait for the last one.
	waitUntil(t, "every outcome counted", func() bool {
		s := d.Snapshot()
		return s.Classes[sms.ClassMarketing].Sent+s.Classes[sms.ClassMarketing].Dead+s.Classes[sms.ClassMarketing].Expired == 3
	})
	got := d.Snapshot()
	want := map[sms.Class]ClassCounts{
		sms.ClassOTP:           {Sent: 2},
		sms.ClassTransactional: {Sent: 2, Failed: 1},
		sms.ClassMarketing:     {Sent: 1, Expired: 1, Dead: 1},
	}
	for c, w := range want {
		if got.Classes[c] != w {
			t.Errorf("class %s: %+v, want %+v", c, got.Classes[c], w)
		}
	}
	if got.Throttled != 1 || got.GuardCount != 1 || got.GuardActive {
		t.Errorf("throttled=%d guard_count=%d active=%v, want 1, 1, false", got.Throttled, got.GuardCount, got.GuardActive)
	}
	if got.SendNow.Sent != 1 || got.SendNow.Unknown != 1 || got.SendNow.Refused() != 1 {
		t.Errorf("send now %+v, want 1 sent and 1 unknown (a 5xx)", got.SendNow)
	}
}

// Each Mark adds the time since the previous mark to its step; a step
// marked twice accumulates; a nil Steps ignores marks.
func TestStepsMark(t *testing.T) {
	s := NewSteps(time.Now().Add(-3 * time.Millisecond))
	s.Mark(StepDecode) // ≥ 3 ms since the start
	s.Mark(StepReserve)
	time.Sleep(2 * time.Millisecond)
	s.Mark(StepDecode) // + ≥ 2 ms
	if d := s.Duration(StepDecode); d < 5*time.Millisecond {
		t.Errorf("decode %s, want >= 5ms (two marks)", d)
	}
	if d := s.Duration(StepReserve); d >= 2*time.Millisecond {
		t.Errorf("reserve %s, want the short gap only", d)
	}
	if s.Duration(StepProvider) != 0 || s.Duration(NumSteps) != 0 {
		t.Errorf("unmarked steps have time: %s", s.ServerTiming())
	}
	st := s.ServerTiming()
	if !strings.HasPrefix(st, "decode;dur=") || strings.Count(st, ";dur=") != int(NumSteps) || !strings.HasSuffix(st, "provider;dur=0") {
		t.Errorf("Server-Timing %q", st)
	}
	var none *Steps
	none.Mark(StepDecode)
	if none.Duration(StepDecode) != 0 || none.ServerTiming() != "" {
		t.Error("nil Steps recorded something")
	}
	if stepsFrom(WithSteps(context.Background(), s)) != s || stepsFrom(context.Background()) != nil {
		t.Error("context does not carry the steps")
	}
}
