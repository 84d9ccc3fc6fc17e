package dispatch

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

func testMetrics(t *testing.T) *metrics {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestHeartbeatLoop: every Lease/3 the heartbeat extends each held lease by
// a full lease; a lease found lost is marked so that it is never sent.
func TestHeartbeatLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 3 * time.Second
		keep := &flight{l: &queue.Leased{Message: &sms.Message{ID: "keep"}, Token: "k"}}
		gone := &flight{l: &queue.Leased{Message: &sms.Message{ID: "gone"}, Token: "g"}}
		var (
			mu      sync.Mutex
			extends = map[string][]time.Duration{}
		)
		start := time.Now()
		h := &heartbeat{
			flights: func() []*flight { return []*flight{keep, gone} },
			extend: func(_ context.Context, l *queue.Leased, d time.Duration) error {
				mu.Lock()
				defer mu.Unlock()
				if d != lease {
					t.Errorf("extended by %s, want the full lease %s", d, lease)
				}
				extends[l.Message.ID] = append(extends[l.Message.ID], time.Since(start))
				if l.Message.ID == "gone" {
					return queue.ErrLeaseLost
				}
				return nil
			},
			lease: lease, log: slog.New(slog.DiscardHandler), m: testMetrics(t), noteError: func() {},
			clock: func() int64 { return int64(time.Since(start)) },
		}
		h.loop = newLoop(lease/3, h.runOnce)
		h.Start(t.Context())
		time.Sleep(3*time.Second + time.Millisecond)
		synctest.Wait()
		h.Stop()
		mu.Lock()
		defer mu.Unlock()
		want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
		if got := extends["keep"]; len(got) != len(want) || got[0] != want[0] || got[2] != want[2] {
			t.Errorf("extends at %v, want %v", got, want)
		}
		if keep.lost.Load() || !gone.lost.Load() {
			t.Errorf("lost flags keep=%v gone=%v, want false/true", keep.lost.Load(), gone.lost.Load())
		}
		// A granted extend confirms the lease from when it was asked; a
		// refused one confirms nothing.
		if c, g := time.Duration(keep.confirmed.Load()), time.Duration(gone.confirmed.Load()); c != 3*time.Second || g != 0 {
			t.Errorf("confirmed keep=%s gone=%s, want 3s and 0s", c, g)
		}
		time.Sleep(5 * time.Second) // stopped: no more extends
		if n := len(extends["keep"]); n != 3 {
			t.Errorf("%d extends after Stop, want none", n-3)
		}
	})
}

// TestRecovererLoop: the recoverer calls Recover once per period until
// stopped; a failing Recover does not end the loop, but the recoverer then
// holds back for its grace (a lease), so that live holders whose acks failed
// with it can ack first.
func TestRecovererLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls int
		var errAt time.Time
		r := &recoverer{
			grace: time.Second,
			sinceErr: func() (time.Duration, bool) {
				return time.Since(errAt), !errAt.IsZero()
			},
			noteError: func() { errAt = time.Now() },
			recover: func(context.Context) (int, error) {
				calls++
				if calls == 1 {
					return 0, context.DeadlineExceeded // a failed round
				}
				return 2, nil
			},
			log: slog.New(slog.DiscardHandler), m: testMetrics(t),
		}
		r.loop = newLoop(500*time.Millisecond, r.runOnce)
		r.Start(t.Context())
		time.Sleep(2*time.Second + time.Millisecond)
		synctest.Wait()
		r.Stop()
		// 0.5 s fails; 1.0 s is within the 1 s grace; 1.5 s and 2.0 s run.
		if calls != 3 {
			t.Errorf("Recover called %d times in 2 s at a 500 ms period with a failure at 0.5 s and 1 s of grace, want 3", calls)
		}
		if v := value(r.m.loopErrors.WithLabelValues("recover")); v != 1 {
			t.Errorf("recover errors %v, want 1", v)
		}
	})
}
