// Package embedded is the one-node queue backend: a bbolt file under
// store.path. Every write is fsynced before the call returns, and concurrent
// writes share one commit (group commit), so kill -9 loses nothing that was
// acknowledged while ingress stays fast.
//
// The file is held with an exclusive lock: two embedded replicas never share
// a store (each would also run the full provider rate; see docs/operations.md,
// section 1).
//
// Layout (all integers big-endian, times in Unix milliseconds):
//
//	msgs     id → record (record.go): the message and its bookkeeping, JSON
//	ready    class(1) due(8) seq(8) → id      queued messages; Take seeks per class
//	leases   expiry(8) id → nil               messages in flight; Recover scans the head
//	idem     len(producer) producer key → created(8) id
//	out      producer → count(8)              queued + leased per producer
//	dead     at(8) id → nil                   dead letters, oldest first
//	done     at(8) id → nil                   terminal messages, pruned after Retention
//	counts   class(1) kind(1) → count(8)      queued, leased, dead per class
//	batch    batch 0 producer 0 id → nil      the index of batches (batches.go)
//
// A queued message's due time is max(enqueue time, NotBefore): everything due
// sorts before everything scheduled, so Take is one cursor Seek per class and
// FIFO by enqueue order, with the sequence number breaking ties.
package embedded

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"smsgw/internal/queue"
)

// FileName is the store file inside Config.Path.
const FileName = "smsgw.db"

// Config configures the embedded queue.
type Config struct {
	Path              string        // directory (store.path); created if missing
	Logger            *slog.Logger  // nil: discard
	Retention         time.Duration // how long terminal messages stay readable; default 7 days
	IdempotencyWindow time.Duration // how long an idempotency key maps to its message; default 24 h
	LockTimeout       time.Duration // how long Open waits for the file lock; default 1 s
	Now               func() time.Time
	Registerer        prometheus.Registerer // nil: metrics are kept but not exported
}

const (
	defaultRetention   = 7 * 24 * time.Hour
	defaultIdemWindow  = 24 * time.Hour
	defaultLockTimeout = time.Second
	// maxBatch bounds the operations in one commit so that one commit's
	// latency stays bounded under a flood of enqueues.
	maxBatch = 512
)

// Queue is a durable priority queue in one bbolt file.
type Queue struct {
	db        *bolt.DB
	log       *slog.Logger
	now       func() time.Time
	retention time.Duration
	window    time.Duration
	metrics   *metrics

	// Where the next prune walks of bFinal and bIdem start (nil: the
	// first key), under pruneMu.
	pruneMu             sync.Mutex
	pruneFrom, idemFrom []byte
	batchFrom           []byte // where the next prune walk of bBatch starts

	ops  chan *op
	stop chan struct{}
	done chan struct{}

	// mu orders Close against everything else: calls hold it for reading
	// while they touch the db or hand an op to the committer.
	mu     sync.RWMutex
	closed bool
}

var _ queue.Queue = (*Queue)(nil)

// Open opens (or creates) the store in cfg.Path and starts its committer.
func Open(cfg Config) (*Queue, error) {
	if cfg.Path == "" {
		return nil, errors.New("queue: embedded: store path is empty")
	}
	cfg.Retention = cmp.Or(cfg.Retention, defaultRetention)
	cfg.IdempotencyWindow = cmp.Or(cfg.IdempotencyWindow, defaultIdemWindow)
	cfg.LockTimeout = cmp.Or(cfg.LockTimeout, defaultLockTimeout)
	if cfg.Retention < 0 || cfg.IdempotencyWindow < 0 || cfg.LockTimeout < 0 {
		return nil, errors.New("queue: embedded: negative retention, idempotency window or lock timeout")
	}
	// The idempotency entry goes with its message; a shorter retention would
	// silently shorten the window.
	if cfg.Retention < cfg.IdempotencyWindow {
		return nil, fmt.Errorf("queue: embedded: retention %v is shorter than the idempotency window %v", cfg.Retention, cfg.IdempotencyWindow)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("queue: embedded: metrics: %w", err)
	}
	if err := os.MkdirAll(cfg.Path, 0o750); err != nil {
		return nil, fmt.Errorf("queue: embedded: create %s: %w", cfg.Path, err)
	}
	file := filepath.Join(cfg.Path, FileName)
	db, err := bolt.Open(file, 0o600, storeOptions(cfg.LockTimeout))
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("queue: embedded: %s is locked by another process (one store per replica; use redis for several): %w", file, err)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: embedded: open %s: %w", file, err)
	}
	if err := db.Update(createBuckets); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("queue: embedded: init %s: %w", file, err)
	}
	q := &Queue{
		db:        db,
		log:       cfg.Logger.With("component", "queue", "backend", "embedded"),
		now:       cfg.Now,
		retention: cfg.Retention,
		window:    cfg.IdempotencyWindow,
		metrics:   m,
		ops:       make(chan *op, maxBatch),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	go q.commitLoop()
	q.log.Info("store opened", "path", file)
	return q, nil
}

// storeOptions are the bbolt options of a store file, for Open and for
// the copy CompactFile writes. The freelist is rebuilt on open instead of
// written on every commit: fewer pages per fsync on the hot path.
func storeOptions(lockTimeout time.Duration) *bolt.Options {
	return &bolt.Options{Timeout: lockTimeout, NoFreelistSync: true, FreelistType: bolt.FreelistMapType}
}

// Close commits what was already handed over, stops the committer and closes
// the file. Calls after Close return queue.ErrClosed.
func (q *Queue) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	q.mu.Unlock()
	close(q.stop)
	<-q.done
	if err := q.db.Close(); err != nil {
		return fmt.Errorf("queue: embedded: close: %w", err)
	}
	return nil
}

// op is one write: fn runs inside a shared read-write transaction. fn must
// report the caller's own outcomes (lease lost, invalid item) through its
// closure and leave the transaction untouched in that case; a returned error
// means the storage failed and aborts the whole commit.
type op struct {
	ctx  context.Context
	fn   func(tx *bolt.Tx) error
	done chan error
}

// update runs fn in the next group commit and returns once it is durable.
// If ctx ends while the op waits, the caller gets ctx's error; the op may
// still commit (a Take then leaves a lease that Recover hands on).
func (q *Queue) update(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o := &op{ctx: ctx, fn: fn, done: make(chan error, 1)}
	q.mu.RLock()
	if q.closed {
		q.mu.RUnlock()
		return queue.ErrClosed
	}
	select {
	case q.ops <- o:
	case <-ctx.Done():
		q.mu.RUnlock()
		return ctx.Err()
	}
	q.mu.RUnlock()
	select {
	case err := <-o.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// view runs fn in a read-only transaction.
func (q *Queue) view(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return queue.ErrClosed
	}
	return q.db.View(fn)
}

// commitLoop is the single writer: it takes every op waiting and commits them
// in one transaction, so N concurrent callers pay for one fsync. There is no
// timer: a lone op commits at once, and ops arriving during a commit form the
// next batch.
//
// After a commit that was shared (a busy store), the loop yields its
// processor once before it gathers the next batch. Coming back from a
// commit's two fdatasyncs it otherwise found only the few ops that had
// reached the channel while the callers behind them waited, runnable, for
// a processor: on 2 cores under 64 concurrent POSTs, commits of 3.9 ops
// and 10,000 fdatasyncs a second. One yield lets them hand their ops over
// first: about 11 ops a commit and a third more accepts a second
// (BenchmarkIngress/embedded, docs/scale.md). A lone op after a lone op
// still commits at once.
func (q *Queue) commitLoop() {
	defer close(q.done)
	batch := make([]*op, 0, maxBatch)
	last := 0
	for {
		select {
		case o := <-q.ops:
			batch = append(batch[:0], o)
			if last > 1 { // the last commit was shared: let its peers submit
				runtime.Gosched()
			}
		case <-q.stop:
			// Close holds no submitter any more: what is in the channel is
			// all there will be. Commit it rather than fail acknowledged
			// hand-overs.
			for {
				select {
				case o := <-q.ops:
					q.commit([]*op{o})
				default:
					return
				}
			}
		}
	fill:
		for len(batch) < maxBatch {
			select {
			case o := <-q.ops:
				batch = append(batch, o)
			default:
				break fill
			}
		}
		last = len(batch)
		q.commit(batch)
	}
}

func (q *Queue) commit(batch []*op) {
	live := make([]*op, 0, len(batch))
	for _, o := range batch {
		if err := o.ctx.Err(); err != nil {
			o.done <- err
			continue
		}
		live = append(live, o)
	}
	if len(live) == 0 {
		return
	}
	start := time.Now()
	err := q.db.Update(func(tx *bolt.Tx) error {
		for _, o := range live {
			if err := o.fn(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		q.metrics.commitSeconds.Observe(time.Since(start).Seconds())
		q.metrics.commitOps.Observe(float64(len(live)))
		for _, o := range live {
			o.done <- nil
		}
		return
	}
	q.metrics.commitErrors.Inc()
	if len(live) == 1 {
		live[0].done <- fmt.Errorf("queue: embedded: commit: %w", err)
		return
	}
	// One op's failure must not fail the others: retry each alone. Every fn
	// recomputes its outcome from the transaction, so running it again is safe.
	q.log.Warn("group commit failed; retrying one by one", "ops", len(live), "err", err)
	for _, o := range live {
		if err := q.db.Update(o.fn); err != nil {
			o.done <- fmt.Errorf("queue: embedded: commit: %w", err)
			continue
		}
		o.done <- nil
	}
}
