package admission

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
	"smsgw/internal/state"
	"smsgw/internal/tick"
)

// A scoped pause holds part of the traffic on every replica while the
// rest flows: a class (the send loop leaves it out of its takes) or a
// producer (the send loop sets its messages aside, once each, on a shelf
// of the queue, and puts them back in line when the pause ends). POST
// /v1/otp answers 503 only while a pause covers the OTP: everything, the
// otp class, or its producer. Scoped pauses are kept beside the pause of
// everything, in a state.ScopedPauses (one HASH with Redis, read by the
// same poll), and a replica's copy is as fresh as the pause of
// everything's.

// Scope is what a scoped pause holds: a class or a producer (one of them).
type Scope struct {
	Class    string
	Producer string
}

func (s Scope) key() string {
	if s.Producer != "" {
		return state.ProducerScope(s.Producer)
	}
	return state.ClassScope(s.Class)
}

// ScopeState is one scoped pause as the admin API reports it.
type ScopeState struct {
	Class    string     `json:"class,omitempty"`
	Producer string     `json:"producer,omitempty"`
	Until    *time.Time `json:"until,omitempty"`
	Reason   string     `json:"reason,omitempty"`
}

// scopeCopy is one scoped pause as this replica knows it.
type scopeCopy struct {
	until  time.Time // zero: until resumed
	reason string
}

func (c scopeCopy) holds(now time.Time) bool { return c.until.IsZero() || now.Before(c.until) }

// SetScopes keeps the scoped pauses in s, and names the configured
// producers: each one's shelf is emptied (Lifted) unless its pause holds,
// so that messages left on a shelf when every replica stopped come back.
// Call it before the pause is used.
func (p *OperatorPause) SetScopes(s state.ScopedPauses, producers []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scoped, p.scopes = s, map[string]scopeCopy{}
	p.shelving = make(map[string]uint64, len(producers))
	for _, name := range producers {
		p.shelving[name]++
	}
}

// setScopesLocked replaces this copy of the scoped pauses with a read.
func (p *OperatorPause) setScopesLocked(read map[string]state.PauseStatus) {
	m := make(map[string]scopeCopy, len(read))
	for s, st := range read {
		if !st.On {
			continue
		}
		c := scopeCopy{reason: st.Reason}
		if st.Remaining > 0 {
			c.until = p.now().Add(st.Remaining)
		}
		m[s] = c
		p.noteShelvingLocked(s)
	}
	p.scopes = m
}

// noteShelvingLocked remembers a producer seen paused: its shelf is to be
// emptied once its pause ends (Lifted).
func (p *OperatorPause) noteShelvingLocked(scope string) {
	if name, ok := strings.CutPrefix(scope, state.ProducerScope("")); ok {
		p.shelving[name]++
	}
}

// scopeStatesLocked lists the scoped pauses that hold at now: classes in
// class order, then producers by name.
func (p *OperatorPause) scopeStatesLocked(now time.Time) []ScopeState {
	var out []ScopeState
	for s, c := range p.scopes {
		if !c.holds(now) {
			continue
		}
		st := ScopeState{Reason: c.reason}
		if name, ok := strings.CutPrefix(s, state.ProducerScope("")); ok {
			st.Producer = name
		} else if cls, ok := strings.CutPrefix(s, state.ClassScope("")); ok {
			st.Class = cls
		} else {
			continue
		}
		if !c.until.IsZero() {
			u := c.until.UTC()
			st.Until = &u
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		if (out[i].Class == "") != (out[j].Class == "") {
			return out[i].Class != ""
		}
		ci, _ := sms.ParseClass(out[i].Class)
		cj, _ := sms.ParseClass(out[j].Class)
		if ci != cj {
			return ci < cj
		}
		return out[i].Producer < out[j].Producer
	})
	return out
}

// PauseScope stops sending what s names for d (0: until ResumeScope) on
// every replica; everything else flows.
func (p *OperatorPause) PauseScope(ctx context.Context, s Scope, d time.Duration, reason string) error {
	if p.scoped == nil {
		return fmt.Errorf("pause %s: scoped pauses are not kept", s.key())
	}
	if err := p.scoped.Set(ctx, s.key(), d, reason); err != nil {
		return fmt.Errorf("pause %s: %w", s.key(), err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.changes++
	sc := scopeCopy{reason: reason}
	if d > 0 {
		sc.until = p.now().Add(d)
	}
	p.scopes[s.key()] = sc
	p.noteShelvingLocked(s.key())
	return nil
}

// ResumeScope lifts the pause of what s names on every replica.
func (p *OperatorPause) ResumeScope(ctx context.Context, s Scope) error {
	if p.scoped == nil {
		return nil
	}
	if err := p.scoped.Clear(ctx, s.key()); err != nil {
		return fmt.Errorf("resume %s: %w", s.key(), err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.changes++
	delete(p.scopes, s.key())
	return nil
}

// held reports whether the scoped pause of key holds now. Like a
// reservation it rereads the shared state first when this copy is stale.
func (p *OperatorPause) held(ctx context.Context, key string) bool {
	p.mu.Lock()
	none := p.scoped == nil
	p.mu.Unlock()
	if none {
		return false
	}
	p.freshen(ctx)
	return p.HeldNow(key)
}

// HeldNow reports, from this copy alone (no read), whether the scoped
// pause of key (state.ClassScope, state.ProducerScope) holds now.
func (p *OperatorPause) HeldNow(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	sc, ok := p.scopes[key]
	return ok && sc.holds(p.now())
}

// ClassHeld reports whether a pause of class c holds now.
func (p *OperatorPause) ClassHeld(ctx context.Context, c sms.Class) bool {
	return p.held(ctx, state.ClassScope(c.String()))
}

// ProducerHeld reports whether a pause of producer holds now.
func (p *OperatorPause) ProducerHeld(ctx context.Context, producer string) bool {
	return p.held(ctx, state.ProducerScope(producer))
}

// Lift is a producer whose shelf is to be emptied (Lifted).
type Lift struct {
	Producer string
	seen     uint64 // how often its pause was seen when listed
}

// Lifted lists the producers whose shelves are to be emptied: seen paused
// (or named at start) and not paused now. Restored takes one off the list
// once its shelf is empty, unless its pause was seen again meanwhile.
func (p *OperatorPause) Lifted() []Lift {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.shelving) == 0 {
		return nil
	}
	now := p.now()
	var out []Lift
	for name, seen := range p.shelving {
		if sc, ok := p.scopes[state.ProducerScope(name)]; !ok || !sc.holds(now) {
			out = append(out, Lift{Producer: name, seen: seen})
		}
	}
	return out
}

// Restored records that l's shelf was emptied after its pause.
func (p *OperatorPause) Restored(l Lift) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shelving[l.Producer] == l.seen {
		delete(p.shelving, l.Producer)
	}
}

// HeldScopes is the scoped pauses that hold now, as this replica last
// read them (the stats' pause.scopes, the metrics).
func (p *OperatorPause) HeldScopes() []ScopeState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.scopeStatesLocked(p.now())
}

// ShelfKeeper empties, every period, the shelves of the producers whose
// pause ended (Lifted): each message goes back to the place in line it
// was set aside from. It reads nothing while no producer pause ended.
type ShelfKeeper struct {
	p     *OperatorPause
	q     queue.Shelver
	every time.Duration
	log   *slog.Logger
	T     tick.Ticker

	failing bool // only the loop's goroutine reads and writes it
}

// ShelfEvery is how often a ShelfKeeper looks for a pause that ended; it
// bounds how long a producer's messages wait after its resume.
const ShelfEvery = 250 * time.Millisecond

// NewShelfKeeper empties q's shelves for the pause p every period.
func NewShelfKeeper(p *OperatorPause, q queue.Shelver, every time.Duration, log *slog.Logger) *ShelfKeeper {
	return &ShelfKeeper{p: p, q: q, every: every, log: log}
}

// RunOnce empties the shelves of every producer whose pause ended. A
// shelf it could not empty is tried again next time; the failure is
// logged once until a shelf is emptied again.
func (k *ShelfKeeper) RunOnce(ctx context.Context) error {
	k.p.freshen(ctx) // a copy never read yet (at start) is read first
	for _, l := range k.p.Lifted() {
		moved := 0
		for {
			n, err := k.q.Restore(ctx, l.Producer, queue.MaxRestore)
			if err != nil {
				if !k.failing && ctx.Err() == nil {
					k.failing = true
					k.log.Warn("producer pause ended: its messages cannot be put back in line yet; trying again", "producer", l.Producer, "err", err)
				}
				return err
			}
			if n == 0 {
				break
			}
			moved += n
		}
		k.failing = false
		if moved > 0 {
			k.log.Info("producer pause ended: its messages are back in line", "producer", l.Producer, "messages", moved)
		}
		k.p.Restored(l)
	}
	return nil
}

// Start runs until Stop or until ctx ends.
func (k *ShelfKeeper) Start(ctx context.Context) { k.T.Start(ctx, k.every, k.RunOnce) }

// Stop ends the loop and waits for it.
func (k *ShelfKeeper) Stop() { k.T.Halt() }
