package dispatch

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/provider"
	"smsgw/internal/provider/sim"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

// TestThrottleAllPausesEveryReplica: the provider answers 429 to everything
// for 3 s in the middle of a campaign. The first 429 pauses every replica
// (shared pause): a replica starts no send once it has seen a 429, so the
// only 429s it gets are for sends already in flight (one, on an idle
// machine; more when a loaded machine stretches sends until they overlap),
// the account is never suspended and every message is still delivered
// exactly once.
func TestThrottleAllPausesEveryReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("7 s campaign")
	}
	t.Parallel()
	const campaign = 250
	acct := newAccount(t)
	s, _, url := startSim(t, sim.Config{Limit: 100})
	producer := acct.queue(t, nil)
	ids := enqueueN(t, producer, campaign, sms.ClassMarketing)
	watches := make([]*throttleWatch, 3)
	reps := startReplicas(t, acct, 3, url, &redistest.RoundTrips{}, func(c *Config) {
		w := &throttleWatch{next: c.Provider}
		for i := range watches {
			if watches[i] == nil {
				watches[i] = w
				break
			}
		}
		c.Provider = w
	})

	waitUntil(t, "50 accepted", func() bool { return s.Stats().Accepted >= 50 })
	throttleFor := sim.Duration(3 * time.Second)
	// The throttle starts somewhere inside Apply: it surely covers
	// [applied, beforeApply+3s], however long Apply took.
	beforeApply := time.Now()
	if err := s.Apply(sim.Control{ThrottleAllFor: &throttleFor}); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()
	waitUntil(t, "the campaign to be accepted", func() bool { return s.Stats().Accepted >= campaign })
	msgs := waitTerminal(t, producer, ids...)

	st := s.Stats()
	t.Logf("sim: accepted=%d 429s=%d 403s=%d duplicates=%d max_in_any_1s=%d", st.Accepted, st.Rejected429, st.Rejected403, st.Duplicates, st.MaxMessagesInAny1s)
	late := 0
	for _, w := range watches {
		late += w.startedAfter429()
	}
	if st.Rejected429 < 1 || late != 0 {
		t.Errorf("provider answered %d 429s, %d of them to sends a replica started after it had seen a 429; want at least one, and none started after", st.Rejected429, late)
	}
	if st.Rejected403 != 0 || st.Suspended {
		t.Errorf("account suspended (403s=%d)", st.Rejected403)
	}
	if st.Accepted != campaign || st.Duplicates != 0 {
		t.Errorf("accepted %d with %d duplicates, want %d exactly once", st.Accepted, st.Duplicates, campaign)
	}
	for i, r := range reps {
		n := value(r.d.m.throttles)
		paused := value(r.d.m.reservations.WithLabelValues("marketing", reservePaused)) + value(r.d.m.requeues.WithLabelValues("marketing", requeuePaused))
		t.Logf("replica %d: 429s=%v paused reservations/requeues=%v", i, n, paused)
		if n == 0 && paused == 0 {
			t.Errorf("replica %d neither saw a 429 nor the shared pause", i)
		}
	}
	for _, rec := range s.Accepted() {
		if rec.At.After(applied) && rec.At.Before(beforeApply.Add(time.Duration(throttleFor))) {
			t.Errorf("message %s accepted %s into the 3 s throttle", rec.Reference, rec.At.Sub(beforeApply))
		}
	}
	for _, id := range ids {
		if m := msgs[id]; m.Status != sms.StatusSent || m.Attempts != 1 {
			t.Errorf("message %s: %s after %d attempts, want sent after 1 (throttles spend none)", id, m.Status, m.Attempts)
		}
	}
}

// throttleWatch wraps a replica's provider and notes, for each 429, whether
// the send had started after the replica had already seen a 429: the pause
// must stop such sends, whatever the timing.
type throttleWatch struct {
	next provider.Provider

	mu   sync.Mutex
	seen int // 429 answers received
	late int // 429 answers to sends started after seen > 0
}

func (w *throttleWatch) Name() string { return w.next.Name() }

func (w *throttleWatch) Send(ctx context.Context, req *provider.Request) (provider.Result, error) {
	w.mu.Lock()
	after := w.seen > 0
	w.mu.Unlock()
	res, err := w.next.Send(ctx, req)
	if pe := provider.AsError(err); pe != nil && pe.Reason == provider.ReasonThrottled {
		w.mu.Lock()
		w.seen++
		if after {
			w.late++
		}
		w.mu.Unlock()
	}
	return res, err
}

func (w *throttleWatch) startedAfter429() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.late
}

// replica is one Dispatcher with its own Redis connection pool and HTTP
// client, as a separate gateway process would have.
type replica struct {
	d      *Dispatcher
	client *redis.Client
}

// startReplicas starts n Dispatchers sharing the account's Redis queue,
// limiter and guard and one provider URL. Every replica's Redis round trips
// go through hook.
func startReplicas(t *testing.T, acct account, n int, url string, hook *redistest.RoundTrips, tune func(*Config)) []replica {
	t.Helper()
	out := make([]replica, n)
	for i := range out {
		c := redis.NewClient(&redis.Options{Addr: acct.client.Options().Addr, PoolSize: 16})
		c.AddHook(hook)
		t.Cleanup(func() { _ = c.Close() })
		guard := acct.guard(t, c, GuardConfig{})
		cfg := Config{
			Queue:    acct.queue(t, c),
			Limiter:  acct.limiter(t, c, defaultLimits),
			Provider: newHTTPProvider(t, url),
			Guard:    guard,
			Owner:    fmt.Sprintf("replica-%d", i),
			// The gateway's defaults.
			Workers:    16,
			OTPWorkers: 4,
		}
		if tune != nil {
			tune(&cfg)
		}
		d, _ := newDispatcher(t, cfg)
		out[i] = replica{d: d, client: c}
	}
	return out
}
