package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
)

// PauseStatus is the operator pause as stored.
type PauseStatus struct {
	On        bool
	Remaining time.Duration // what is left of a timed pause; 0: until cleared
	Reason    string
}

// Pause is the operator's pause switch. Unlike the limiter's pause (which a
// provider 429 sets, and which only ever lengthens) it is set and cleared
// by an operator: a later Set replaces an earlier one, whatever its length.
type Pause interface {
	// Set pauses for d (0: until Clear) with a reason.
	Set(ctx context.Context, d time.Duration, reason string) error
	// Clear lifts the pause.
	Clear(ctx context.Context) error
	// Get reads the switch.
	Get(ctx context.Context) (PauseStatus, error)
}

// MaxPauseReason bounds the stored reason.
const MaxPauseReason = 1024

func checkPause(ctx context.Context, d time.Duration, reason string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d < 0 || (d > 0 && d < time.Millisecond) {
		return fmt.Errorf("state: pause %s must be 0 (until cleared) or at least 1ms", d)
	}
	if len(reason) > MaxPauseReason {
		return fmt.Errorf("state: pause reason of %d bytes, at most %d", len(reason), MaxPauseReason)
	}
	return nil
}

// RedisPause is the switch shared by every replica: one key whose value is
// the reason and whose TTL is the rest of a timed pause.
type RedisPause struct{ onRedis }

var _ Pause = (*RedisPause)(nil)

// NewRedisPause returns the switch of sp's account on c.
func NewRedisPause(c redis.UniversalClient, sp keyspace.Space) (*RedisPause, error) {
	return newOnRedis[RedisPause](c, sp)
}

// Set writes the key, with d as its TTL (none for 0).
func (p *RedisPause) Set(ctx context.Context, d time.Duration, reason string) error {
	if err := checkPause(ctx, d, reason); err != nil {
		return fmt.Errorf("state: pause: %w", err)
	}
	if err := p.c.Set(ctx, p.k.pause(), reason, d).Err(); err != nil {
		return fmt.Errorf("state: pause on redis: %w", err)
	}
	return nil
}

// Clear deletes the key.
func (p *RedisPause) Clear(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("state: resume: %w", err)
	}
	if err := p.c.Del(ctx, p.k.pause()).Err(); err != nil {
		return fmt.Errorf("state: resume on redis: %w", err)
	}
	return nil
}

// Get reads the key and its TTL in one round trip.
func (p *RedisPause) Get(ctx context.Context) (PauseStatus, error) {
	if err := ctx.Err(); err != nil {
		return PauseStatus{}, fmt.Errorf("state: read pause: %w", err)
	}
	pipe := p.c.Pipeline()
	get := pipe.Get(ctx, p.k.pause())
	ttl := pipe.PTTL(ctx, p.k.pause())
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return PauseStatus{}, fmt.Errorf("state: read pause on redis: %w", err)
	}
	reason, err := get.Result()
	if errors.Is(err, redis.Nil) {
		return PauseStatus{}, nil
	}
	if err != nil {
		return PauseStatus{}, fmt.Errorf("state: read pause on redis: %w", err)
	}
	// PTTL is -1 (a duration of -1ns) for a key without expiry: until
	// cleared. -2 says the key expired between GET and PTTL: off.
	switch d := ttl.Val(); {
	case d > 0:
		return PauseStatus{On: true, Remaining: d, Reason: reason}, nil
	case d == -1:
		return PauseStatus{On: true, Reason: reason}, nil
	}
	return PauseStatus{}, nil
}

// LocalPause is the switch of this process (embedded mode). Safe for
// concurrent use.
type LocalPause struct {
	now func() time.Time

	mu     sync.Mutex
	on     bool
	until  time.Time // zero: until cleared
	reason string
}

var _ Pause = (*LocalPause)(nil)

// NewLocalPause returns a switch that is off.
func NewLocalPause() *LocalPause { return &LocalPause{now: time.Now} }

// Set pauses for d (0: until Clear).
func (p *LocalPause) Set(ctx context.Context, d time.Duration, reason string) error {
	if err := checkPause(ctx, d, reason); err != nil {
		return fmt.Errorf("state: pause: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.on, p.reason, p.until = true, reason, time.Time{}
	if d > 0 {
		p.until = p.now().Add(d)
	}
	return nil
}

// Clear lifts the pause.
func (p *LocalPause) Clear(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("state: resume: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.on, p.reason, p.until = false, "", time.Time{}
	return nil
}

// Get reads the switch.
func (p *LocalPause) Get(ctx context.Context) (PauseStatus, error) {
	if err := ctx.Err(); err != nil {
		return PauseStatus{}, fmt.Errorf("state: read pause: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on {
		return PauseStatus{}, nil
	}
	if p.until.IsZero() {
		return PauseStatus{On: true, Reason: p.reason}, nil
	}
	rem := p.until.Sub(p.now())
	if rem <= 0 {
		return PauseStatus{}, nil
	}
	return PauseStatus{On: true, Remaining: rem, Reason: p.reason}, nil
}
