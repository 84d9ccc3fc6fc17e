package admission

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// A class pause holds the messages of one class in the queue on every
// replica while the other classes flow: the send loop leaves the class out
// of its takes, and the OTP fast path answers 503 only while OTP is
// paused. It is kept beside the pause of everything, in a
// state.ScopedPauses (one HASH with Redis, read by the same poll), and a
// replica's copy is as fresh as the pause of everything's.

// ScopeState is one class pause as the admin API reports it.
type ScopeState struct {
	Class  string     `json:"class"`
	Until  *time.Time `json:"until,omitempty"`
	Reason string     `json:"reason,omitempty"`
}

// scopeCopy is one scoped pause as this replica knows it.
type scopeCopy struct {
	until  time.Time // zero: until resumed
	reason string
}

const classScopePrefix = "class:"

func classScope(c sms.Class) string { return classScopePrefix + c.String() }

// SetScopes keeps the class pauses in s; call it before the pause is used.
func (p *OperatorPause) SetScopes(s state.ScopedPauses) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scoped, p.scopes = s, map[string]scopeCopy{}
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
	}
	p.scopes = m
}

// scopeStatesLocked lists the class pauses that hold at now, in class order.
func (p *OperatorPause) scopeStatesLocked(now time.Time) []ScopeState {
	var out []ScopeState
	for s, c := range p.scopes {
		if !c.until.IsZero() && !now.Before(c.until) {
			continue
		}
		cls, ok := strings.CutPrefix(s, classScopePrefix)
		if !ok {
			continue
		}
		st := ScopeState{Class: cls, Reason: c.reason}
		if !c.until.IsZero() {
			u := c.until.UTC()
			st.Until = &u
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		ci, _ := sms.ParseClass(out[i].Class)
		cj, _ := sms.ParseClass(out[j].Class)
		return ci < cj
	})
	return out
}

// PauseClass stops sending class c for d (0: until ResumeClass) on every
// replica; the other classes flow.
func (p *OperatorPause) PauseClass(ctx context.Context, c sms.Class, d time.Duration, reason string) error {
	if p.scoped == nil {
		return fmt.Errorf("pause %s: class pauses are not kept", c)
	}
	if err := p.scoped.Set(ctx, classScope(c), d, reason); err != nil {
		return fmt.Errorf("pause %s: %w", c, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.changes++
	sc := scopeCopy{reason: reason}
	if d > 0 {
		sc.until = p.now().Add(d)
	}
	p.scopes[classScope(c)] = sc
	return nil
}

// ResumeClass lifts the pause of class c on every replica.
func (p *OperatorPause) ResumeClass(ctx context.Context, c sms.Class) error {
	if p.scoped == nil {
		return nil
	}
	if err := p.scoped.Clear(ctx, classScope(c)); err != nil {
		return fmt.Errorf("resume %s: %w", c, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.changes++
	delete(p.scopes, classScope(c))
	return nil
}

// ClassHeld reports whether a class pause holds class c now. Like a
// reservation it rereads the shared state first when this copy is stale.
func (p *OperatorPause) ClassHeld(ctx context.Context, c sms.Class) bool {
	p.mu.Lock()
	none := p.scoped == nil
	p.mu.Unlock()
	if none {
		return false
	}
	p.freshen(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	sc, ok := p.scopes[classScope(c)]
	return ok && (sc.until.IsZero() || p.now().Before(sc.until))
}

// HeldClasses is how many classes a pause holds now, as this replica
// last read it (the metric smsgw_admin_paused_classes).
func (p *OperatorPause) HeldClasses() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.scopeStatesLocked(p.now()))
}
