// Package redisq is the Redis backend of the queue seam, shared by every
// gateway replica of one provider account.
//
// Every state change is one Lua script (the contract of each sits above its
// Go wrapper), so a change is atomic and one round trip: Take and Complete
// cost one round trip each. (A take given the suppression list reads it in
// its script; one that finds messages whose numbers are on it ends them
// with the completion script in one more round trip, a pipeline.) All keys carry the hash tag {smsgw:<account>},
// so the scripts run unchanged on Redis Cluster. Redis TIME is the only
// clock; durations from callers are relative.
//
// Layout (see keys.go): each message's record (record.go: JSON with its own
// short field names, the storage schema) in one HASH keyed by id; per class a
// ready ZSET (score = ready time µs, member = sequence + id so equal times
// stay FIFO), a lease ZSET (score = lease expiry µs) and a dead-letter ZSET;
// one HASH of lease tokens; per creation second a LIST of the final records
// (queue.EncodeFinal) of completed messages, expiring Retention after its
// last completion (a message leaves msgs when it completes), which Compact
// turns into one compressed STRING once it has been quiet a while
// (compact.go); the ZSET of
// messages an earlier release completed in msgs, pruned after Retention;
// per-producer outstanding counters; one key per idempotency key.
package redisq

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// Defaults for Config.
const (
	DefaultRetention         = 7 * 24 * time.Hour
	DefaultIdempotencyWindow = 24 * time.Hour
)

// Config configures a Queue.
type Config struct {
	// Client reaches Redis: a *redis.Client, *redis.ClusterClient or a
	// Sentinel failover client. The caller owns it; Close does not close it.
	Client redis.UniversalClient
	// Account is the provider account; it names the hash tag of every key.
	Account string
	Logger  *slog.Logger // nil: discard
	// Retention is how long a terminal message stays readable by Get.
	Retention time.Duration
	// IdempotencyWindow is how long (Producer, IdempotencyKey) maps to the
	// first message.
	IdempotencyWindow time.Duration
	// Registerer receives the backend's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// WaitReplicas > 0: an enqueue returns only once that many replicas of
	// the master hold it (WAIT, on the enqueue's own connection), or fails
	// with queue.ErrNotReplicated after WaitTimeout.
	WaitReplicas int
	WaitTimeout  time.Duration
	// CompactAfter is how long a creation second's final records must have
	// been left alone (no completion, no receipt) before Compact may
	// compress them (compact.go); 0: DefaultCompactAfter.
	CompactAfter time.Duration
	// CompactClaim is how long the seconds one Compact call takes are out
	// of the other replicas' reach (compact.go: a replica that dies
	// holding them delays them by as much), in whole ms (less: no claim);
	// 0: DefaultCompactClaim.
	CompactClaim time.Duration
}

// Queue is the Redis queue. It is safe for concurrent use.
type Queue struct {
	compactAfter time.Duration // Config.CompactAfter
	compactClaim time.Duration // Config.CompactClaim

	c         redis.UniversalClient
	account   string
	k         keys
	acctTag   string // every check key starts with it (EnqueueChecked)
	log       *slog.Logger
	retention time.Duration
	window    time.Duration
	m         *metrics
	closed    atomic.Bool
	pruned    atomic.Int64           // when Recover last pruned, UnixNano
	epoch     atomic.Pointer[string] // the account data's epoch marker as last seen (nil: not yet)
	waitN     int                    // WaitReplicas
	waitFor   time.Duration          // WaitTimeout
}

var _ queue.Queue = (*Queue)(nil)

// New returns a queue over cfg.Client. It does not contact Redis; call
// CheckPersistence at start-up.
func New(cfg Config) (*Queue, error) {
	if cfg.Client == nil {
		return nil, errors.New("redisq: Config.Client is required")
	}
	sp, err := keyspace.New(cfg.Account)
	if err != nil {
		return nil, fmt.Errorf("redisq: Config.Account: %w", err)
	}
	if cfg.WaitReplicas < 0 || (cfg.WaitReplicas > 0 && cfg.WaitTimeout <= 0) {
		return nil, errors.New("redisq: WaitReplicas must not be negative, and needs a WaitTimeout > 0")
	}
	if cfg.Retention < 0 || cfg.IdempotencyWindow < 0 || cfg.CompactAfter < 0 || cfg.CompactClaim < 0 {
		return nil, errors.New("redisq: Retention, IdempotencyWindow, CompactAfter and CompactClaim must not be negative")
	}
	cfg.CompactAfter = cmp.Or(cfg.CompactAfter, DefaultCompactAfter)
	cfg.CompactClaim = cmp.Or(cfg.CompactClaim, DefaultCompactClaim)
	cfg.Retention = cmp.Or(cfg.Retention, DefaultRetention)
	cfg.IdempotencyWindow = cmp.Or(cfg.IdempotencyWindow, DefaultIdempotencyWindow)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("redisq: register metrics: %w", err)
	}
	return &Queue{
		c:         cfg.Client,
		account:   cfg.Account,
		k:         newKeys(cfg.Account),
		acctTag:   sp.Prefix(),
		log:       log.With("component", "queue", "backend", "redis", "account", cfg.Account),
		retention: cfg.Retention,
		window:    cfg.IdempotencyWindow,
		m:         m,
		waitN:     cfg.WaitReplicas,
		waitFor:   cfg.WaitTimeout,

		compactAfter: cfg.CompactAfter,
		compactClaim: cfg.CompactClaim,
	}, nil
}

// Close makes every later call return ErrClosed. The client stays open: the
// caller owns it (the limiter shares it).
func (q *Queue) Close() error {
	if q.closed.Swap(true) {
		return queue.ErrClosed
	}
	return nil
}

// begin is the common guard of every call.
func (q *Queue) begin(ctx context.Context, op string) error {
	if q.closed.Load() {
		return fmt.Errorf("redisq: %s: %w", op, queue.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisq: %s: %w", op, err)
	}
	return nil
}

// us converts a duration to whole µs, rounding up so that nothing is handed
// out before its time.
func us(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

func newToken() string { return rand.Text() }

func checkClasses(cs []sms.Class) ([]sms.Class, error) {
	if len(cs) == 0 {
		return sms.Classes, nil
	}
	for _, c := range cs {
		if !c.Valid() {
			return nil, fmt.Errorf("invalid class %d", uint8(c))
		}
	}
	return cs, nil
}
