// Package history keeps the last minutes of the gateway's send figures for
// the ops page: per step (5 s by default, 15 minutes of them), the messages
// sent and queued per class, the provider 429s, and the queue depth per
// class at the end of the step.
//
// Two stores keep it, and pass one conformance suite:
//
//   - Local, a ring buffer in the process (embedded mode): Window/Step
//     slots, reused in turn, so its memory is fixed.
//   - Redis, one small hash per step under the account's hash tag, expiring
//     once it has left the window. Every replica adds its own counts to the
//     same hashes, so every replica reads the same, account-wide history.
//
// Steps are numbered by the store's clock (Redis TIME for the shared store,
// like the limiter), so replicas whose clocks differ still agree on which
// step is which. A Recorder adds, once per step, what this process counted
// since its last run.
package history

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"smsgw/internal/sms"
)

// Defaults: one step every 5 s for 15 minutes (180 steps).
const (
	DefaultStep   = 5 * time.Second
	DefaultWindow = 15 * time.Minute
	// MaxSteps bounds Window/Step: the memory of Local and the keys one
	// Read of the Redis store touches.
	MaxSteps = 1000
)

// PerClass holds one figure per class, indexed by sms.Class.
type PerClass [sms.ClassMarketing + 1]int64

// Sum is the total over the classes.
func (p PerClass) Sum() int64 {
	var n int64
	for _, v := range p {
		n += v
	}
	return n
}

// Sample is one step: what was counted during it (summed over the
// replicas) and the queue depth last recorded in it.
type Sample struct {
	Sent      PerClass // accepted by the provider: queued sends and the OTP fast path
	Direct    int64    // of Sent, OTP fast-path sends (they never were in the queue)
	Accepted  PerClass // messages producers queued
	Throttled int64    // provider 429s
	Queued    PerClass // the backlog due now (ready + leased), valid when HasQueued
	HasQueued bool     // some replica read the queue depth in this step
}

// add adds o's counts to s and takes o's queue depth when it has one.
func (s *Sample) add(o Sample) {
	for i := range s.Sent {
		s.Sent[i] += o.Sent[i]
		s.Accepted[i] += o.Accepted[i]
	}
	s.Direct += o.Direct
	s.Throttled += o.Throttled
	if o.HasQueued {
		s.Queued, s.HasQueued = o.Queued, true
	}
}

// Series is the history: consecutive steps, oldest first, the first
// starting at Start.
type Series struct {
	Start   time.Time
	Step    time.Duration
	Samples []Sample
}

// End is when the last step ends.
func (s Series) End() time.Time { return s.Start.Add(time.Duration(len(s.Samples)) * s.Step) }

// Store keeps the steps of the last Window.
type Store interface {
	// Now is the store's clock: the process clock for Local, Redis TIME for
	// the shared store.
	Now(ctx context.Context) (time.Time, error)
	// Add adds s's counts to the step that holds at, and sets that step's
	// queue depth when s.HasQueued. A step already out of the window is
	// dropped.
	Add(ctx context.Context, at time.Time, s Sample) error
	// Read returns the Window/Step steps that ended at or before now, the
	// last one ending at the start of the step that holds now. Steps
	// nothing was added to are zero.
	Read(ctx context.Context, now time.Time) (Series, error)
}

// Config sizes a store.
type Config struct {
	Step   time.Duration // 0: DefaultStep
	Window time.Duration // 0: DefaultWindow
}

func (c Config) withDefaults() (Config, error) {
	if c.Step == 0 {
		c.Step = DefaultStep
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	var errs []error
	if c.Step < time.Millisecond || c.Step%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("step %s must be a whole number of milliseconds, at least 1", c.Step))
	}
	if c.Window < c.Step || c.Window%c.Step != 0 {
		errs = append(errs, fmt.Errorf("window %s must be a multiple of step %s", c.Window, c.Step))
	} else if c.Window/c.Step > MaxSteps {
		errs = append(errs, fmt.Errorf("window %s / step %s exceeds %d steps", c.Window, c.Step, MaxSteps))
	}
	if err := errors.Join(errs...); err != nil {
		return c, fmt.Errorf("history: %w", err)
	}
	return c, nil
}

func (c Config) steps() int { return int(c.Window / c.Step) }

// stepOf is the number of the step that holds t.
func (c Config) stepOf(t time.Time) int64 {
	ms := t.UnixMilli()
	step := c.Step.Milliseconds()
	n := ms / step
	if ms%step < 0 {
		n-- // floor for times before 1970
	}
	return n
}

func (c Config) startOf(step int64) time.Time {
	return time.UnixMilli(step * c.Step.Milliseconds()).UTC()
}

// lastSteps are the numbers of the steps Read returns for now, oldest first.
func (c Config) lastSteps(now time.Time) (first, last int64) {
	last = c.stepOf(now) - 1
	return last - int64(c.steps()) + 1, last
}

// Pace is the current pace of the queue (one class, or all): the backlog B,
// how fast queued messages leave for the provider (μ) and how fast
// producers queue more (λ₀), over the last steps.
type Pace struct {
	Backlog     int64
	SendRate    float64 // μ, messages per second
	ArrivalRate float64 // λ₀, messages per second
}

// Drain is how long the backlog takes to drain at this pace, B / (μ − λ₀):
// 0 for an empty queue, and ok false when it does not shrink (μ ≤ λ₀).
func (p Pace) Drain() (d time.Duration, ok bool) {
	if p.Backlog <= 0 {
		return 0, true
	}
	net := p.SendRate - p.ArrivalRate
	if net <= 0 {
		return 0, false
	}
	secs := float64(p.Backlog) / net
	if secs > float64(math.MaxInt64/int64(time.Second)) {
		return 0, false
	}
	return time.Duration(secs * float64(time.Second)), true
}

// Pace measures the last `over` steps (at most all of them): the rates are
// their averages, the backlog the last queue depth recorded among them.
// known is false when none of them recorded a queue depth.
func (s Series) Pace(over int) (total Pace, byClass [sms.ClassMarketing + 1]Pace, known bool) {
	over = min(over, len(s.Samples))
	if over <= 0 || s.Step <= 0 {
		return total, byClass, false
	}
	recent := s.Samples[len(s.Samples)-over:]
	secs := (time.Duration(over) * s.Step).Seconds()
	var sent, accepted PerClass
	var direct int64
	for _, smp := range recent {
		for i := range sent {
			sent[i] += smp.Sent[i]
			accepted[i] += smp.Accepted[i]
		}
		direct += smp.Direct
	}
	// Fast-path OTPs never were in the queue: they do not drain it.
	sent[sms.ClassOTP] = max(0, sent[sms.ClassOTP]-direct)
	var depth PerClass
	for i := len(recent) - 1; i >= 0; i-- {
		if recent[i].HasQueued {
			depth, known = recent[i].Queued, true
			break
		}
	}
	for i := range byClass {
		byClass[i] = Pace{Backlog: depth[i], SendRate: float64(sent[i]) / secs, ArrivalRate: float64(accepted[i]) / secs}
	}
	total = Pace{Backlog: depth.Sum(), SendRate: float64(sent.Sum()) / secs, ArrivalRate: float64(accepted.Sum()) / secs}
	return total, byClass, known
}
