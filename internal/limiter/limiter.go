// Package limiter paces sends with GCRA (the generic cell rate algorithm).
//
// There are two deciders with the same behaviour: Local (in-process,
// monotonic clock) and Redis (one Lua script per decision, Redis TIME as the
// only clock, shared by every replica). Shared wraps Redis in a circuit
// breaker and falls back to a Local limiter at target_rps / max_senders when
// Redis fails. The producer ingress keys have the same pair (LocalKeys,
// RedisKeys) and the same wrapper (SharedKeys); both wrappers follow the one
// breaker policy of breaker.go. The package knows nothing of queues or
// providers.
package limiter

import (
	"context"
	"errors"
	"time"
)

// ErrCostExceedsBurst is returned for a cost that can never be granted
// because it is larger than the burst of a key it must pass.
var ErrCostExceedsBurst = errors.New("limiter: cost exceeds burst")

// Rate is one GCRA key's parameters: Rate units per second, of which Burst
// may go at once after idle. Burst >= 1.
type Rate struct {
	PerSecond float64
	Burst     int
}

// Config is the limiter's shape, a tree: a global rate for the provider
// account, optional caps for some classes and optional limits for some
// senders (a send's "from"). A request passes the global key, its class's
// key when the class is capped and its sender's key when the sender is
// limited, all in one atomic step.
type Config struct {
	Global  Rate
	Classes map[string]Rate // class name -> cap; classes without an entry only pass the global key
	Senders map[string]Rate // sender -> limit; senders without an entry pass no key of their own
}

// MaxCost is the largest cost a Request of class can ever be granted by a
// limiter of this shape: the smallest burst of the keys it must pass. The
// Redis-down fallback of Shared grants less (its bursts are divided by
// max_senders); a cost up to MaxCost refused there is granted again once
// Redis answers.
func (c Config) MaxCost(class string) int {
	b := c.Global.Burst
	if r, ok := c.Classes[class]; ok {
		b = min(b, r.Burst)
	}
	return b
}

// Request asks for Cost units for Class, accepting a slot up to MaxWait ahead.
type Request struct {
	Class   string
	Cost    int           // >= 1; segments of the message
	MaxWait time.Duration // 0: only a slot available now
	// Spare is how many units of the global key's burst must stay free
	// after this booking, counted from now (0: none): the bulk classes
	// leave one, so that an OTP arriving next never waits for slots they
	// booked ahead. A request costing more than burst − Spare may still
	// take the whole burst when the global key is idle.
	Spare int
	// Hasty marks a caller whose deadline cannot pay for a Redis call
	// that fails (the OTP fast path): while Shared decides locally
	// because Redis was lost, a hasty request is decided locally at once
	// and is never the breaker's probe (other callers and Probe find
	// Redis back).
	Hasty bool
	// Sender is the send's "from" ("" for the account's default sender):
	// its limit, when Config.Senders has one, and its pause (PauseSender)
	// apply. Never logged: a long code is a phone number.
	Sender string
}

// Decision is the answer to a Request.
//
// Allowed: the slot is reserved; sleep Delay (0 when available now), then
// send. Not allowed: nothing was recorded; RetryAfter is the exact time after
// which the same request would be allowed (the caller waits that long or
// requeues). Paused tells that the denial came from the account's shared
// pause. SenderPaused and SenderLimited tell that it came from the
// request's sender alone, its pause or its own limit: the caller puts
// that sender's message off for RetryAfter and holds back no other
// sender.
type Decision struct {
	Allowed       bool
	Delay         time.Duration
	RetryAfter    time.Duration
	Paused        bool
	SenderPaused  bool
	SenderLimited bool
	Mode          Mode
}

// Mode tells which decider answered.
type Mode string

// The deciders.
const (
	ModeLocal    Mode = "local"    // embedded: one process, full target rate
	ModeShared   Mode = "shared"   // Redis GCRA shared by every replica
	ModeFallback Mode = "fallback" // Redis unreachable: local at target / max_senders
)

// KeyState is how far ahead one key's schedule runs.
type KeyState struct {
	Name  string        // "global" or a class name
	Ahead time.Duration // theoretical arrival time minus now (0 when idle)
	Rate  Rate
}

// State is what an operator sees on the dashboard.
type State struct {
	Mode           Mode
	PauseRemaining time.Duration
	Keys           []KeyState
}

// Limiter is what callers use; Local and Shared implement it.
type Limiter interface {
	Reserve(ctx context.Context, r Request) (Decision, error)
	// Pause stops every Reserve for d (shared by all replicas where the
	// limiter is shared). A shorter pause never shortens a longer one.
	Pause(ctx context.Context, d time.Duration) error
	// PauseSender stops the Reserves of one sender for d (shared by all
	// replicas where the limiter is shared); it returns the pause in
	// force, never shorter than one already set.
	PauseSender(ctx context.Context, sender string, d time.Duration) (time.Duration, error)
	State(ctx context.Context) (State, error)
}
