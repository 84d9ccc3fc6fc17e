package dispatch

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"smsgw/internal/limiter"
	"smsgw/internal/provider/sim"
	"smsgw/internal/sms"
)

// burstSwitch is a limiter whose largest grantable cost can be changed,
// as the Redis-down fallback's burst (1 with many replicas) gives way to
// the shared burst when Redis is back. It records the costs it granted.
type burstSwitch struct {
	limiter.Limiter
	max     atomic.Int64
	mu      sync.Mutex
	granted []int
}

func (b *burstSwitch) Reserve(ctx context.Context, req limiter.Request) (limiter.Decision, error) {
	if int64(req.Cost) > b.max.Load() {
		return limiter.Decision{}, limiter.ErrCostExceedsBurst
	}
	d, err := b.Limiter.Reserve(ctx, req)
	if err == nil && d.Allowed {
		b.mu.Lock()
		b.granted = append(b.granted, req.Cost)
		b.mu.Unlock()
	}
	return d, err
}

// largest is the largest cost granted since the last call.
func (b *burstSwitch) largest() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := 0
	for _, c := range b.granted {
		m = max(m, c)
	}
	b.granted = nil
	return m
}

// TestLearnedBatchCapRecovers: batches learned to be too big while the
// limiter's burst was 1 (the fallback's) grow back to BulkBatch once the
// burst is back, instead of staying at one message per reservation for the
// life of the process.
func TestLearnedBatchCapRecovers(t *testing.T) {
	t.Parallel()
	acct := newAccount(t)
	_, p, _ := startSim(t, sim.Config{})
	lim := &burstSwitch{Limiter: acct.limiter(t, nil, limiter.Config{Global: limiter.Rate{PerSecond: 1000, Burst: 5}})}
	lim.max.Store(1)
	q := acct.queue(t, nil)
	d, _ := newDispatcher(t, Config{Queue: q, Limiter: lim, Provider: p, LearnedCapTTL: 50 * time.Millisecond})
	batch := func() []string {
		ids := enqueueN(t, q, 8, sms.ClassTransactional)
		d.Notify(sms.ClassTransactional)
		return ids
	}
	waitTerminal(t, q, batch()...)
	if c := lim.largest(); c != 1 {
		t.Fatalf("largest cost granted with burst 1: %d", c)
	}
	lim.max.Store(5) // the full burst is back
	waitUntil(t, "a reservation of more than one message again", func() bool {
		waitTerminal(t, q, batch()...)
		return lim.largest() > 1
	})
}

// A learned cap keeps the smaller of two, and is forgotten after its ttl.
func TestLearnedCapsExpire(t *testing.T) {
	t.Parallel()
	var l learnedCaps
	i := classIndex(sms.ClassMarketing)
	l.lower(i, 3, time.Hour)
	l.lower(i, 4, time.Hour)
	if c := l.get(i); c != 3 {
		t.Errorf("cap %d after 3 then 4, want 3", c)
	}
	l.lower(i, 0, time.Hour)
	if c := l.get(i); c != 1 {
		t.Errorf("cap %d after 0, want at least 1", c)
	}
	j := classIndex(sms.ClassTransactional)
	if c := l.get(j); c != 0 {
		t.Errorf("another class has cap %d", c)
	}
	l.lower(j, 2, 0) // a cap learned with no time to live is already gone
	if c := l.get(j); c != 0 {
		t.Errorf("cap %d after its ttl, want 0 (none)", c)
	}
}
