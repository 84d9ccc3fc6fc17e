package dispatch

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/queue"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

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
