package history

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

// source plays the process being recorded: counters that only grow and a
// queue whose depth can fail to answer.
type source struct {
	mu       sync.Mutex
	c        Counters
	depth    PerClass
	depthErr error
}

func (s *source) counters() Counters {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c
}

func (s *source) readDepth(context.Context) (PerClass, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.depth, s.depthErr
}

func (s *source) count(f func(c *Counters)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.c)
}

func newRecorder(t *testing.T, st Store, src *source) *Recorder {
	t.Helper()
	r, err := NewRecorder(RecorderConfig{Store: st, Counters: src.counters, Depth: src.readDepth, Every: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func total(t *testing.T, st Store, now time.Time) Sample {
	t.Helper()
	s, err := st.Read(t.Context(), now)
	if err != nil {
		t.Fatal(err)
	}
	var sum Sample
	for _, smp := range s.Samples {
		sum.add(smp)
	}
	return sum
}

func TestRecorderAddsIncreases(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := base.Add(time.Second)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	st, err := NewLocal(suiteConfig, clock)
	if err != nil {
		t.Fatal(err)
	}
	src := &source{depth: sent(0, 0, 7)}
	r := newRecorder(t, st, src)
	src.count(func(c *Counters) {
		c.Sent[sms.ClassOTP], c.Direct, c.Accepted[sms.ClassMarketing], c.Throttled = 3, 2, 5, 1
	})
	if err := r.runOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := read(t, st, base.Add(5*time.Second)).Samples[11]
	want := Sample{Sent: sent(3, 0, 0), Direct: 2, Accepted: sent(0, 0, 5), Throttled: 1, Queued: sent(0, 0, 7), HasQueued: true}
	if got != want {
		t.Fatalf("first sample %+v\nwant         %+v", got, want)
	}

	// The next step: only the increase is added; a queue that does not
	// answer leaves the depth out, not the counts.
	mu.Lock()
	now = base.Add(6 * time.Second)
	mu.Unlock()
	src.count(func(c *Counters) { c.Sent[sms.ClassMarketing] += 40; c.Throttled++ })
	src.depthErr = errors.New("queue down")
	if err := r.runOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	got = read(t, st, base.Add(10*time.Second)).Samples[11]
	if want := (Sample{Sent: sent(0, 0, 40), Throttled: 1}); got != want {
		t.Fatalf("second sample %+v\nwant          %+v", got, want)
	}
}

// TestRecorderRetriesWhatTheStoreMissed: while Redis is down nothing is
// marked as recorded; once it is back the increase since the last
// successful run is added, once. (The private Redis restarts empty, so
// what it held before is gone: 25 - 10 must be there, no more, no less.)
func TestRecorderRetriesWhatTheStoreMissed(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	st := newRedisStore(t, c, suiteConfig)
	src := &source{}
	r := newRecorder(t, st, src)

	src.count(func(c *Counters) { c.Sent[sms.ClassTransactional] = 10 })
	if err := r.runOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	now, err := st.Now(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := total(t, st, now.Add(suiteConfig.Step)).Sent[sms.ClassTransactional]; got != 10 {
		t.Fatalf("recorded %d transactional sends, want 10", got)
	}
	srv.Stop()
	src.count(func(c *Counters) { c.Sent[sms.ClassTransactional] = 25 })
	if err := r.runOnce(t.Context()); err == nil {
		t.Fatal("runOnce with Redis stopped: no error")
	}
	srv.Start()
	if err := r.runOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if now, err = st.Now(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := total(t, st, now.Add(suiteConfig.Step)).Sent[sms.ClassTransactional]; got != 15 {
		t.Fatalf("after Redis came back %d transactional sends were recorded, want the 15 missed", got)
	}
}

// TestRecorderLoopAndFinalFlush: the loop records by itself, and Stop adds
// what was counted after its last run.
func TestRecorderLoopAndFinalFlush(t *testing.T) {
	t.Parallel()
	st, err := NewLocal(Config{Step: time.Second, Window: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	src := &source{}
	r := newRecorder(t, st, src)
	r.Start(t.Context())
	src.count(func(c *Counters) { c.Accepted[sms.ClassOTP] = 3 })
	deadline := time.Now().Add(10 * time.Second)
	for total(t, st, time.Now().Add(time.Second)).Accepted[sms.ClassOTP] != 3 {
		if time.Now().After(deadline) {
			r.Stop()
			t.Fatal("the loop did not record the counts")
		}
		time.Sleep(5 * time.Millisecond)
	}
	src.count(func(c *Counters) { c.Accepted[sms.ClassOTP] = 1000 })
	r.Stop()
	r.Stop() // a second Stop is harmless
	if got := total(t, st, time.Now().Add(time.Second)).Accepted[sms.ClassOTP]; got != 1000 {
		t.Fatalf("after Stop the history holds %d accepted, want 1000", got)
	}
}

func TestNewRecorderNeedsItsParts(t *testing.T) {
	t.Parallel()
	if _, err := NewRecorder(RecorderConfig{}); err == nil {
		t.Fatal("NewRecorder without a store: no error")
	}
}
