package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/limiter"
)

// operatorPause is the admin's stop switch. Unlike the limiter's pause
// (which a provider 429 sets, and which only ever lengthens) it can be
// lifted. It acts through the limiter the dispatcher uses: while paused
// every reservation is denied, so queued messages wait and the OTP fast
// path answers 503. With Redis the switch is one key shared by every
// replica, read every pollEvery; without Redis it lives in this process.
type operatorPause struct {
	c     redis.UniversalClient // nil: local only
	key   string
	now   func() time.Time
	log   *slog.Logger
	every time.Duration

	mu     sync.Mutex
	on     bool
	until  time.Time // zero: until resumed
	reason string
	// changes counts this process's Pause and Resume calls. A poll whose
	// read began before one of them may carry the state from before it,
	// and is dropped: applied, it would undo the change until the next poll.
	changes uint64

	stop chan struct{}
	done chan struct{}
}

const pausePollEvery = 500 * time.Millisecond

// PauseState is what the admin API reports.
type PauseState struct {
	Paused bool       `json:"paused"`
	Until  *time.Time `json:"until,omitempty"`
	Reason string     `json:"reason,omitempty"`
}

func (p *operatorPause) state() PauseState {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if !p.on || (!p.until.IsZero() && !now.Before(p.until)) {
		return PauseState{}
	}
	st := PauseState{Paused: true, Reason: p.reason}
	if !p.until.IsZero() {
		u := p.until.UTC()
		st.Until = &u
	}
	return st
}

// remaining is the rest of a timed pause (0 when not paused or paused
// until resumed, which no estimate can include).
func (p *operatorPause) remaining(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on || p.until.IsZero() || !now.Before(p.until) {
		return 0
	}
	return p.until.Sub(now)
}

func (p *operatorPause) active(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.on && (p.until.IsZero() || now.Before(p.until))
}

// set records a change made by this process.
func (p *operatorPause) set(on bool, d time.Duration, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.changes++
	p.setLocked(on, d, reason)
}

// changeCount is the number of changes this process made so far.
func (p *operatorPause) changeCount() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changes
}

// setPolled records the shared state read by a poll that began after
// change number seen, unless this process changed the state since.
func (p *operatorPause) setPolled(seen uint64, on bool, d time.Duration, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.changes == seen {
		p.setLocked(on, d, reason)
	}
}

func (p *operatorPause) setLocked(on bool, d time.Duration, reason string) {
	p.on, p.reason, p.until = on, reason, time.Time{}
	if on && d > 0 {
		p.until = p.now().Add(d)
	}
}

// Pause stops sending for d (0: until Resume).
func (p *operatorPause) Pause(ctx context.Context, d time.Duration, reason string) error {
	if p.c != nil {
		if err := p.c.Set(ctx, p.key, reason, d).Err(); err != nil {
			return fmt.Errorf("pause: %w", err)
		}
	}
	p.set(true, d, reason)
	return nil
}

// Resume lifts the pause on every replica.
func (p *operatorPause) Resume(ctx context.Context) error {
	if p.c != nil {
		if err := p.c.Del(ctx, p.key).Err(); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
	}
	p.set(false, 0, "")
	return nil
}

// poll reads the shared switch once.
func (p *operatorPause) poll(ctx context.Context) error {
	seen := p.changeCount()
	pipe := p.c.Pipeline()
	get := pipe.Get(ctx, p.key)
	ttl := pipe.PTTL(ctx, p.key)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	reason, err := get.Result()
	if errors.Is(err, redis.Nil) {
		p.setPolled(seen, false, 0, "")
		return nil
	}
	d := ttl.Val()
	if d < 0 {
		d = 0
	}
	p.setPolled(seen, true, d, reason)
	return nil
}

// start polls the shared switch until stopped; a failed read keeps the
// last known state.
func (p *operatorPause) start(ctx context.Context) {
	if p.c == nil {
		return
	}
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			pctx, cancel := context.WithTimeout(ctx, p.every)
			if err := p.poll(pctx); err != nil && ctx.Err() == nil {
				p.log.Warn("operator pause: read shared state", "err", err)
			}
			cancel()
			select {
			case <-t.C:
			case <-p.stop:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
}

func (p *operatorPause) close() {
	if p.stop == nil {
		return
	}
	close(p.stop)
	<-p.done
	p.stop = nil
}

// pausedLimiter denies every reservation while the operator pause is on.
type pausedLimiter struct {
	limiter.Limiter
	p *operatorPause
}

// pausedRetry is how soon a denied sender asks again during a pause; it
// bounds how long sending lags behind a resume on this replica.
const pausedRetry = 250 * time.Millisecond

func (l pausedLimiter) Reserve(ctx context.Context, r limiter.Request) (limiter.Decision, error) {
	if now := l.p.now(); l.p.active(now) {
		retry := pausedRetry
		if rem := l.p.remaining(now); rem > 0 && rem < retry {
			retry = rem
		}
		return limiter.Decision{Allowed: false, RetryAfter: retry, Paused: true}, nil
	}
	return l.Limiter.Reserve(ctx, r)
}
