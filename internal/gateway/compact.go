package gateway

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"smsgw/internal/queue/embedded"
	"smsgw/internal/queue/redisq"
	"smsgw/internal/tick"
)

// compactor compacts the final records of quiet seconds on Redis
// (redisq.Queue.Compact): every replica runs it; each call claims the
// seconds it takes, so replicas passing at once take different ones, and
// a second two replicas still compact at once (a claim that ran out) is
// compacted once, so no replica needs to lead.
type compactor struct {
	q   *redisq.Queue
	log *slog.Logger
	t   tick.Ticker

	mu      sync.Mutex
	failing bool
}

// compactEvery is how often a sending replica compacts; an idle one
// compacts every compactIdleEvery (ticker.quiet). compactPerPass bounds
// one call: at 100 messages a second one second of final records is ~10
// KB, so a pass reads at most ~1 MB from Redis, and a replica can catch up
// 6 seconds of records per second.
const (
	compactEvery     = 10 * time.Second
	compactIdleEvery = time.Minute
	compactPerPass   = 64
)

func newCompactor(q *redisq.Queue, log *slog.Logger, quiet *tick.QuietGate) *compactor {
	c := &compactor{q: q, log: log}
	c.t.Quiet, c.t.QuietEvery = quiet, compactIdleEvery
	return c
}

// runOnce compacts until nothing more is due or the period is over. A
// failure is logged when it starts and when it ends, not on every pass.
func (c *compactor) runOnce(ctx context.Context) error {
	var err error
	for {
		var n int
		n, err = c.q.Compact(ctx, compactPerPass)
		if err != nil || n < compactPerPass {
			break
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil && !errors.Is(ctx.Err(), context.Canceled) && !c.failing:
		c.failing = true
		c.log.Warn("compaction of final records failed; they stay uncompacted until it works again", "err", err)
	case err == nil && c.failing:
		c.failing = false
		c.log.Info("compaction of final records works again")
	}
	return err
}

// Start compacts until Stop or until ctx ends.
func (c *compactor) Start(ctx context.Context) { c.t.Start(ctx, compactEvery, c.runOnce) }

// Stop ends the compaction and waits for it.
func (c *compactor) Stop() { c.t.Halt() }

// CompactStore rewrites the embedded store in dir without its free pages
// (smsgw compact-store); the gateway must not be running on it.
func CompactStore(dir string, lockTimeout time.Duration) (embedded.CompactResult, error) {
	return embedded.CompactFile(dir, lockTimeout)
}
