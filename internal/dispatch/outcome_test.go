package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/provider/sim"
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
