package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"smsgw/internal/limiter"
	"smsgw/internal/state"
	"smsgw/internal/tick"
)

// OperatorPause is the admin's stop switch as this replica sees it. Unlike
// the limiter's pause (which a provider 429 sets, and which only ever
// lengthens) it can be lifted. It acts through the limiter the dispatcher
// uses: while paused every reservation is denied, so queued messages wait
// and the OTP fast path answers 503.
//
// The switch itself is a state.Pause: one key shared by every replica with
// Redis, this process's memory embedded. Every reservation asks the switch,
// so it answers from this copy: what this replica last set, or (with Redis)
// what a PausePoller last read; another replica's pause reaches this one
// within the poll period.
type OperatorPause struct {
	store state.Pause
	now   func() time.Time

	mu     sync.Mutex
	on     bool
	until  time.Time // zero: until resumed
	reason string
	// readAt is when this copy was last read from the store or set here.
	readAt time.Time
	// failing: the last read from the store failed (Redis not answering);
	// a reservation then does not wait for a read of its own (freshen).
	failing bool
	// changes counts this process's Pause and Resume calls. A poll whose
	// read began before one of them may carry the state from before it,
	// and is dropped: applied, it would undo the change until the next poll.
	changes uint64

	// scoped holds the pauses of one class (scopedpause.go); nil: none.
	scoped state.ScopedPauses
	scopes map[string]scopeCopy
	// shelving: producers whose shelves are to be emptied once their
	// pause ends (Lifted), each with how often its pause was seen.
	shelving map[string]uint64
}

// pausePollEvery is how often a sending replica rereads the shared
// switch; an idle one rereads it every pauseIdlePoll, and its first
// reservation after a longer gap reads it first (pausedLimiter), so that
// no send goes on a copy older than pauseStaleAfter. That is twice the
// poll period, so that a sending replica's poller, even late on a busy
// machine, keeps the copy fresh and no reservation waits for the read.
const (
	PausePollEvery  = 500 * time.Millisecond
	PauseIdlePoll   = 10 * time.Second
	pauseStaleAfter = 2 * PausePollEvery
)

// NewOperatorPause is the operator pause kept in store, read through now.
func NewOperatorPause(store state.Pause, now func() time.Time) *OperatorPause {
	return &OperatorPause{store: store, now: now}
}

// PauseState is what the admin API reports.
type PauseState struct {
	Paused bool       `json:"paused"`
	Until  *time.Time `json:"until,omitempty"`
	Reason string     `json:"reason,omitempty"`
	// Scopes are the pauses of one class or one producer, beside the
	// pause of everything (scopedpause.go).
	Scopes []ScopeState `json:"scopes,omitempty"`
}

// State is the pause as this replica knows it.
func (p *OperatorPause) State() PauseState {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	scopes := p.scopeStatesLocked(now)
	if !p.on || (!p.until.IsZero() && !now.Before(p.until)) {
		return PauseState{Scopes: scopes}
	}
	st := PauseState{Paused: true, Reason: p.reason, Scopes: scopes}
	if !p.until.IsZero() {
		u := p.until.UTC()
		st.Until = &u
	}
	return st
}

// remaining is the rest of a timed pause (0 when not paused or paused
// until resumed, which no estimate can include).
func (p *OperatorPause) remaining(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on || p.until.IsZero() || !now.Before(p.until) {
		return 0
	}
	return p.until.Sub(now)
}

// Left is the rest of a timed pause now (0 when not paused or paused
// until resumed).
func (p *OperatorPause) Left() time.Duration { return p.remaining(p.now()) }

// Active reports whether the pause holds at now.
func (p *OperatorPause) Active(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.on && (p.until.IsZero() || now.Before(p.until))
}

// set records a change made by this process.
func (p *OperatorPause) set(on bool, d time.Duration, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.changes++
	p.setLocked(on, d, reason)
}

// changeCount is the number of changes this process made so far.
func (p *OperatorPause) changeCount() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changes
}

// setPolled records the shared state read by a poll that began after
// change number seen, unless this process changed the state since.
func (p *OperatorPause) setPolled(seen uint64, on bool, d time.Duration, reason string, scopes map[string]state.PauseStatus) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changes == seen {
		p.setLocked(on, d, reason)
		if p.scoped != nil {
			p.setScopesLocked(scopes)
		}
	}
}

func (p *OperatorPause) setLocked(on bool, d time.Duration, reason string) {
	p.readAt = time.Now()
	p.on, p.reason, p.until = on, reason, time.Time{}
	if on && d > 0 {
		p.until = p.now().Add(d)
	}
}

// Pause stops sending for d (0: until Resume) on every replica.
func (p *OperatorPause) Pause(ctx context.Context, d time.Duration, reason string) error {
	if err := p.store.Set(ctx, d, reason); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	p.set(true, d, reason)
	return nil
}

// Resume lifts the pause on every replica.
func (p *OperatorPause) Resume(ctx context.Context) error {
	if err := p.store.Clear(ctx); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	p.set(false, 0, "")
	return nil
}

// freshen rereads the stored switch when this copy is older than
// pauseStaleAfter (an idle replica's poller slowed down); a failed read
// keeps the last known state, as the poller does. While reads fail it
// reads nothing: a store that does not answer would hold the reservation
// (an OTP's whole deadline) for a state the poller, still trying, finds
// as soon as the store answers.
func (p *OperatorPause) freshen(ctx context.Context) {
	p.mu.Lock()
	stale := !p.failing && time.Since(p.readAt) > pauseStaleAfter
	if stale {
		p.readAt = time.Now() // one attempt per period, even when it fails
	}
	p.mu.Unlock()
	if stale {
		if dl, ok := ctx.Deadline(); ok {
			// A caller with a deadline (an OTP) gives the read an eighth
			// of it, as the limiter gives Redis: a store that has just
			// stopped answering must not take the whole deadline.
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(dl)/8))
			defer cancel()
		}
		_ = p.refresh(ctx)
	}
}

// refresh copies the stored switch.
func (p *OperatorPause) refresh(ctx context.Context) error {
	seen := p.changeCount()
	st, err := p.store.Get(ctx)
	var scopes map[string]state.PauseStatus
	if err == nil && p.scoped != nil {
		scopes, err = p.scoped.All(ctx)
	}
	p.mu.Lock()
	p.failing = err != nil
	p.mu.Unlock()
	if err != nil {
		return err
	}
	p.setPolled(seen, st.On, st.Remaining, st.Reason, scopes)
	return nil
}

// PausePoller rereads the shared switch every period. A failed read keeps
// the last known state; the failure is logged once, and the recovery once.
type PausePoller struct {
	p     *OperatorPause
	every time.Duration
	log   *slog.Logger
	T     tick.Ticker

	mu      sync.Mutex
	failing bool
}

// NewPausePoller reads the shared pause switch every period.
func NewPausePoller(p *OperatorPause, every time.Duration, log *slog.Logger) *PausePoller {
	return &PausePoller{p: p, every: every, log: log}
}

// RunOnce reads the switch once. A read cut short by Stop (a cancelled
// context) is not a failure; one that ran out of time is.
func (l *PausePoller) RunOnce(ctx context.Context) error {
	err := l.p.refresh(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err != nil && !errors.Is(ctx.Err(), context.Canceled) && !l.failing:
		l.failing = true
		l.log.Warn("operator pause: cannot read the shared switch; keeping the last known state", "err", err)
	case err == nil && l.failing:
		l.failing = false
		l.log.Info("operator pause: reading the shared switch again")
	}
	return err
}

// Start polls until Stop or until ctx ends.
func (l *PausePoller) Start(ctx context.Context) { l.T.Start(ctx, l.every, l.RunOnce) }

// Stop ends the polling and waits for it.
func (l *PausePoller) Stop() { l.T.Halt() }

// PausedLimiter denies every reservation while the operator pause is on.
type PausedLimiter struct {
	limiter.Limiter
	P *OperatorPause
}

// PausedRetry is how soon a denied sender asks again during a pause; it
// bounds how long sending lags behind a resume on this replica.
const PausedRetry = 250 * time.Millisecond

// Reserve denies every reservation while the operator pause is on and asks
// the wrapped limiter otherwise.
func (l PausedLimiter) Reserve(ctx context.Context, r limiter.Request) (limiter.Decision, error) {
	l.P.freshen(ctx)
	if now := l.P.now(); l.P.Active(now) {
		retry := PausedRetry
		if rem := l.P.remaining(now); rem > 0 && rem < retry {
			retry = rem
		}
		return limiter.Decision{Allowed: false, RetryAfter: retry, Paused: true}, nil
	}
	return l.Limiter.Reserve(ctx, r)
}
