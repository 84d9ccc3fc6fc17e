package dispatch

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/keyspace"
	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/queue"
	"smsgw/internal/queue/embedded"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

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
		sp, err := keyspace.New(acct.name)
		if err != nil {
			t.Fatal(err)
		}
		list, err := state.NewRedisSuppressions(acct.client, sp, 0)
		if err != nil {
			t.Fatal(err)
		}
		return acct.queue(t, nil), acct.limiter(t, nil, defaultLimits), list, acct.suppression(t)
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
