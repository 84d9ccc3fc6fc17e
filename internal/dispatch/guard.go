package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math"
)

// Guard counts provider 429s in a rolling window so that the send loop can
// slow down long before the provider suspends the account (the simulator and
// the real provider suspend after more than 300 429s in 10 minutes).
type Guard interface {
	// Record429 records one provider 429 now and returns how many the
	// window holds, this one included.
	Record429(ctx context.Context) (count int, err error)
	// Count returns how many 429s the window holds now.
	Count(ctx context.Context) (int, error)
	// ActivateAt is the count from which the guard is active:
	// ceil(Share · Threshold).
	ActivateAt() int
}

// ThrottleWindow is where a Guard keeps its 429s: the rolling window of
// the provider's suspension rule. The caller owns the storage and its
// window length: internal/state has one shared by every replica of an
// account (Redis) and one in this process (embedded mode). This package
// only applies the policy.
type ThrottleWindow interface {
	Record429(ctx context.Context) (int, error)
	Count(ctx context.Context) (int, error)
}

// GuardConfig is the guard's policy. Zero fields take the defaults.
type GuardConfig struct {
	Threshold int     // 429s in the window that suspend the account; default 300
	Share     float64 // active from Share·Threshold 429s; default 0.5
}

// Guard defaults: the provider's suspension rule (more than 300 429s in 10
// minutes; the window is the storage's).
const (
	DefaultGuardThreshold = 300
	DefaultGuardShare     = 0.5
)

func (c GuardConfig) withDefaults() (GuardConfig, error) {
	if c.Threshold == 0 {
		c.Threshold = DefaultGuardThreshold
	}
	if c.Share == 0 {
		c.Share = DefaultGuardShare
	}
	var errs []error
	if c.Threshold < 1 {
		errs = append(errs, fmt.Errorf("threshold %d must be >= 1", c.Threshold))
	}
	if math.IsNaN(c.Share) || c.Share <= 0 || c.Share > 1 {
		errs = append(errs, fmt.Errorf("share %v must be in (0, 1]", c.Share))
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("dispatch: guard config: %w", errors.Join(errs...))
	}
	return c, nil
}

// windowGuard is a Guard: a ThrottleWindow with the policy's activation
// count.
type windowGuard struct {
	ThrottleWindow
	activateAt int
}

// NewGuard returns the Guard that counts in w and is active from
// ceil(Share · Threshold) 429s.
func NewGuard(w ThrottleWindow, cfg GuardConfig) (Guard, error) {
	if w == nil {
		return nil, errors.New("dispatch: guard: window is nil")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return windowGuard{ThrottleWindow: w, activateAt: max(1, int(math.Ceil(cfg.Share*float64(cfg.Threshold))))}, nil
}

// ActivateAt is ceil(Share · Threshold).
func (g windowGuard) ActivateAt() int { return g.activateAt }
