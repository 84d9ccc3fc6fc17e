package history

import (
	"context"
	"sync"
	"time"
)

// Local is the history of this process: a ring of Window/Step slots, each
// reused when its step comes round again. Safe for concurrent use.
type Local struct {
	cfg Config
	now func() time.Time

	mu    sync.Mutex
	slots []slot
}

type slot struct {
	step int64 // the step the sample belongs to; a stale slot reads as zero
	s    Sample
}

var _ Store = (*Local)(nil)

// NewLocal returns an empty ring. now is its clock (nil: time.Now).
func NewLocal(cfg Config, now func() time.Time) (*Local, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	slots := make([]slot, cfg.steps())
	for i := range slots {
		slots[i].step = -1 << 62 // no step yet
	}
	return &Local{cfg: cfg, now: now, slots: slots}, nil
}

// Now is the process clock.
func (l *Local) Now(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	return l.now(), nil
}

func (l *Local) index(step int64) int {
	n := int64(len(l.slots))
	return int(((step % n) + n) % n)
}

// Add adds s to the step that holds at.
func (l *Local) Add(ctx context.Context, at time.Time, s Sample) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	step := l.cfg.stepOf(at)
	l.mu.Lock()
	defer l.mu.Unlock()
	sl := &l.slots[l.index(step)]
	switch {
	case sl.step > step:
		return nil // the slot already holds a later step: at left the window
	case sl.step < step:
		*sl = slot{step: step}
	}
	sl.s.add(s)
	return nil
}

// Read returns the steps of the window before now.
func (l *Local) Read(ctx context.Context, now time.Time) (Series, error) {
	if err := ctx.Err(); err != nil {
		return Series{}, err
	}
	first, last := l.cfg.lastSteps(now)
	out := Series{Start: l.cfg.startOf(first), Step: l.cfg.Step, Samples: make([]Sample, 0, last-first+1)}
	l.mu.Lock()
	defer l.mu.Unlock()
	for step := first; step <= last; step++ {
		var s Sample
		if sl := l.slots[l.index(step)]; sl.step == step {
			s = sl.s
		}
		out.Samples = append(out.Samples, s)
	}
	return out, nil
}
