package limiter

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Local is GCRA in one process. It reads a monotonic clock, so a wall-clock
// step (NTP, an operator's date command) neither stops nor frees sending.
// Safe for concurrent use.
type Local struct {
	clock func() int64 // monotonic microseconds
	mode  Mode
	cfg   Config
	c     compiled

	mu         sync.Mutex
	globalTAT  int64
	classTAT   map[string]int64
	pauseUntil int64
	// senderTAT holds the limited senders' schedules (Config.Senders
	// bounds it); senderPause every sender's pause end.
	senderTAT   map[string]int64
	senderPause SenderTimes
}

var _ Limiter = (*Local)(nil)

// NewLocal returns an in-process limiter for cfg.
func NewLocal(cfg Config) (*Local, error) {
	return newLocal(cfg, monotonicClock())
}

// monotonicClock returns microseconds since its creation; time.Since reads
// the monotonic clock.
func monotonicClock() func() int64 {
	start := time.Now()
	return func() int64 { return int64(time.Since(start) / time.Microsecond) }
}

func newLocal(cfg Config, clock func() int64) (*Local, error) {
	c, err := compile(cfg)
	if err != nil {
		return nil, err
	}
	return &Local{clock: clock, mode: ModeLocal, cfg: cfg, c: c, classTAT: make(map[string]int64),
		senderTAT: make(map[string]int64, len(c.senders))}, nil
}

// Reserve decides r against the global key, for a capped class the class
// key and for a limited sender the sender's key.
func (l *Local) Reserve(ctx context.Context, r Request) (Decision, error) {
	r, err := checkRequest(r)
	if err != nil {
		return Decision{}, err
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	ps := []params{l.c.global}
	tats := []int64{l.globalTAT}
	cp, capped := l.c.classes[r.Class]
	if capped {
		ps = append(ps, cp)
		tats = append(tats, l.classTAT[r.Class])
	}
	sp, limited := l.c.senders[r.Sender]
	sender := -1
	if limited {
		sender = len(ps)
		ps = append(ps, sp)
		tats = append(tats, l.senderTAT[r.Sender])
	}
	if exceedsBurst(ps, int64(r.Cost), sender) {
		return Decision{}, ErrCostExceedsBurst
	}
	if l.pauseUntil > now {
		return Decision{RetryAfter: micros(l.pauseUntil - now), Paused: true, Mode: l.mode}, nil
	}
	if until := l.senderPause.Get(r.Sender); until > now {
		return Decision{RetryAfter: micros(until - now), SenderPaused: true, Mode: l.mode}, nil
	}
	out, wait := step(now, tats, ps, int64(r.Cost), floorMicros(r.MaxWait), int64(r.Spare), sender)
	if out == tooBig {
		return Decision{}, ErrCostExceedsBurst
	}
	// A denial changed nothing but a TAT lowered to its reach, which is
	// kept as the script keeps it (on this monotonic clock it never is).
	l.globalTAT = tats[0]
	if capped {
		l.classTAT[r.Class] = tats[1]
	}
	if limited {
		l.senderTAT[r.Sender] = tats[sender]
	}
	switch out {
	case senderLate:
		return Decision{RetryAfter: micros(wait), SenderLimited: true, Mode: l.mode}, nil
	case tooLate:
		return Decision{RetryAfter: micros(wait - floorMicros(r.MaxWait)), Mode: l.mode}, nil
	case noRoom:
		return Decision{RetryAfter: micros(wait), Mode: l.mode}, nil
	}
	return Decision{Allowed: true, Delay: micros(wait), Mode: l.mode}, nil
}

// Pause stops every Reserve of this process for d; it never shortens a
// longer pause.
func (l *Local) Pause(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pauseUntil = max(l.pauseUntil, l.clock()+ceilMicros(d))
	return nil
}

// PauseSender stops the Reserves of sender for d; it never shortens a
// longer pause, and returns the pause in force.
func (l *Local) PauseSender(ctx context.Context, sender string, d time.Duration) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	now := l.clock()
	until := l.senderPause.Update(sender, now, func(cur int64) int64 { return max(cur, now+ceilMicros(d)) })
	return micros(until - now), nil
}

// senderPauseRemaining is how long sender's local pause still holds.
func (l *Local) senderPauseRemaining(sender string) time.Duration {
	until := l.senderPause.Get(sender)
	if until == 0 {
		return 0
	}
	return micros(max(0, until-l.clock()))
}

// Resume ends the pause at once: an operator's override (Pause itself
// never shortens a pause).
func (l *Local) Resume(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pauseUntil = 0
	return nil
}

// pauseRemaining is how long the local pause still holds.
func (l *Local) pauseRemaining() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return micros(max(0, l.pauseUntil-l.clock()))
}

// spend marks every key as just used up to its burst, so that a limiter
// taking over from another (fallback after Redis) starts without a burst of
// its own on top of what the shared schedule already sent.
func (l *Local) spend() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	l.globalTAT = max(l.globalTAT, now+l.c.global.burst*l.c.global.interval)
	for name, p := range l.c.classes {
		l.classTAT[name] = max(l.classTAT[name], now+p.burst*p.interval)
	}
	for name, p := range l.c.senders {
		l.senderTAT[name] = max(l.senderTAT[name], now+p.burst*p.interval)
	}
}

// State reports how far ahead each key's schedule runs and the pause.
func (l *Local) State(ctx context.Context) (State, error) {
	if err := ctx.Err(); err != nil {
		return State{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	st := State{Mode: l.mode, PauseRemaining: micros(max(0, l.pauseUntil-now))}
	st.Keys = append(st.Keys, KeyState{Name: "global", Ahead: micros(max(0, l.globalTAT-now)), Rate: l.cfg.Global})
	for _, name := range sortedClasses(l.cfg) {
		st.Keys = append(st.Keys, KeyState{Name: name, Ahead: micros(max(0, l.classTAT[name]-now)), Rate: l.cfg.Classes[name]})
	}
	return st, nil
}

func sortedClasses(cfg Config) []string {
	names := make([]string, 0, len(cfg.Classes))
	for name := range cfg.Classes {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
