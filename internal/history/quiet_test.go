package history

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// A quiet replica that counted nothing new records only once QuietEvery
// has passed; one that counted something, or is not quiet, records every
// step.
func TestRecorderQuiet(t *testing.T) {
	store, err := NewLocal(Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	var quiet atomic.Bool
	quiet.Store(true)
	r, err := NewRecorder(RecorderConfig{Store: store,
		Counters: func() Counters { var c Counters; c.Sent[0] = sent.Load(); return c },
		Depth:    func(context.Context) (PerClass, error) { return PerClass{}, nil },
		Quiet:    quiet.Load, QuietEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if !r.due(time.Time{}) {
		t.Fatal("the first step must record")
	}
	if err := r.runOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	last := time.Now()
	if r.due(last) {
		t.Error("quiet, nothing counted, within QuietEvery: recorded")
	}
	sent.Add(1)
	if !r.due(last) {
		t.Error("quiet but counted a send: not recorded")
	}
	sent.Add(-1)
	quiet.Store(false)
	if !r.due(last) {
		t.Error("not quiet: not recorded")
	}
	quiet.Store(true)
	if !r.due(last.Add(-2 * time.Hour)) {
		t.Error("quiet for longer than QuietEvery: not recorded")
	}
}
