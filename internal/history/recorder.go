package history

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"smsgw/internal/tick"
)

// Counters are this process's cumulative counts since it started.
type Counters struct {
	Sent      PerClass // accepted by the provider, queued sends and the OTP fast path
	Direct    int64    // of Sent, OTP fast-path sends
	Accepted  PerClass // messages producers queued through this process
	Throttled int64    // provider 429s
}

// since is the increase from o to c; a counter that went back (it cannot,
// but a negative count would corrupt the shared history) counts 0.
func (c Counters) since(o Counters) Sample {
	d := func(a, b int64) int64 { return max(0, a-b) }
	var s Sample
	for i := range s.Sent {
		s.Sent[i] = d(c.Sent[i], o.Sent[i])
		s.Accepted[i] = d(c.Accepted[i], o.Accepted[i])
	}
	s.Direct = d(c.Direct, o.Direct)
	s.Throttled = d(c.Throttled, o.Throttled)
	return s
}

// RecorderConfig wires a Recorder.
type RecorderConfig struct {
	Store    Store
	Counters func() Counters                             // this process's cumulative counts
	Depth    func(ctx context.Context) (PerClass, error) // the queue depth now
	Every    time.Duration                               // 0: DefaultStep
	Logger   *slog.Logger                                // nil: discard
	// Quiet, when set, reports that the replica sends nothing: a step in
	// which it holds and this process counted nothing new is recorded only
	// once QuietEvery (0: DefaultQuietEvery) has passed since the last, so
	// that an idle fleet does not write the same depth every step.
	Quiet      func() bool
	QuietEvery time.Duration
}

// DefaultQuietEvery is how often an idle replica records.
const DefaultQuietEvery = 30 * time.Second

// finalFlushBound bounds the last Add of a stopping Recorder.
const finalFlushBound = 2 * time.Second

// Recorder adds, every step, what this process counted since its last run
// and the queue depth to the store.
type Recorder struct {
	cfg RecorderConfig

	mu      sync.Mutex
	last    Counters // already added to the store
	failing bool

	run tick.Loop
}

// NewRecorder checks cfg; Start runs the loop.
func NewRecorder(cfg RecorderConfig) (*Recorder, error) {
	if cfg.Store == nil || cfg.Counters == nil || cfg.Depth == nil {
		return nil, errors.New("history: a recorder needs a store, counters and a depth reader")
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultStep
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.QuietEvery <= 0 {
		cfg.QuietEvery = DefaultQuietEvery
	}
	return &Recorder{cfg: cfg}, nil
}

// runOnce adds one sample. When the store fails nothing is marked as
// added: the counts go into the next sample.
func (r *Recorder) runOnce(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.record(ctx)
	switch {
	case err != nil && !r.failing:
		r.cfg.Logger.Warn("history: not recorded; retrying every step", "err", err)
	case err == nil && r.failing:
		r.cfg.Logger.Info("history: recorded again")
	}
	r.failing = err != nil
	return err
}

func (r *Recorder) record(ctx context.Context) error {
	at, err := r.cfg.Store.Now(ctx)
	if err != nil {
		return err
	}
	cur := r.cfg.Counters()
	s := cur.since(r.last)
	// A queue that does not answer leaves a gap in the depth, not in the counts.
	if depth, derr := r.cfg.Depth(ctx); derr == nil {
		s.Queued, s.HasQueued = depth, true
	}
	if err := r.cfg.Store.Add(ctx, at, s); err != nil {
		return err
	}
	r.last = cur
	return nil
}

// due reports whether this step records: always, unless the replica is
// quiet, counted nothing since the last record and recorded within
// QuietEvery.
func (r *Recorder) due(last time.Time) bool {
	if last.IsZero() || r.cfg.Quiet == nil || time.Since(last) >= r.cfg.QuietEvery || !r.cfg.Quiet() {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg.Counters() != r.last || r.failing
}

// Start runs the loop, at once and then every step, until Stop.
func (r *Recorder) Start(ctx context.Context) {
	r.run.Start(ctx, r.cfg.Every, tick.Options{AtStart: true, Bounded: true, Due: r.due}, func(rctx context.Context) {
		_ = r.runOnce(rctx) // logged by runOnce
	})
}

// Stop ends the loop and adds what was counted since its last run, so a
// replica that stops leaves no hole in the shared history.
func (r *Recorder) Stop() {
	if !r.run.Stop() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), finalFlushBound)
	defer cancel()
	_ = r.runOnce(ctx)
}
