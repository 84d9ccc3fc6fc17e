package dispatch

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Guard counts provider 429s in a rolling window so that the send loop can
// slow down long before the provider suspends the account (the simulator and
// the real provider suspend after more than 300 429s in 10 minutes).
//
// RedisGuard shares the count between every replica of an account;
// LocalGuard counts in memory for embedded mode (one replica).
type Guard interface {
	// Record429 records one provider 429 now and returns how many the
	// window holds, this one included.
	Record429(ctx context.Context) (count int, err error)
	// Count returns how many 429s the window holds now.
	Count(ctx context.Context) (int, error)
	// ActivateAt is the count from which the guard is active:
	// ceil(Share · Threshold).
	ActivateAt() int
}

// GuardConfig shapes a guard. Zero fields take the defaults.
type GuardConfig struct {
	Window    time.Duration // rolling window; default 10 minutes (the provider's)
	Threshold int           // 429s in Window that suspend the account; default 300
	Share     float64       // active from Share·Threshold 429s; default 0.5
}

// Guard defaults: the provider contract of docs/design.md section 1.
const (
	DefaultGuardWindow    = 10 * time.Minute
	DefaultGuardThreshold = 300
	DefaultGuardShare     = 0.5
)

func (c GuardConfig) withDefaults() (GuardConfig, error) {
	if c.Window == 0 {
		c.Window = DefaultGuardWindow
	}
	if c.Threshold == 0 {
		c.Threshold = DefaultGuardThreshold
	}
	if c.Share == 0 {
		c.Share = DefaultGuardShare
	}
	var errs []error
	if c.Window < time.Millisecond {
		errs = append(errs, fmt.Errorf("window %s must be at least 1ms", c.Window))
	}
	if c.Threshold < 1 {
		errs = append(errs, fmt.Errorf("threshold %d must be >= 1", c.Threshold))
	}
	if math.IsNaN(c.Share) || c.Share <= 0 || c.Share > 1 {
		errs = append(errs, fmt.Errorf("share %v must be in (0, 1]", c.Share))
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("dispatch: guard config: %w", errors.Join(errs...))
	}
	return c, nil
}

func (c GuardConfig) activateAt() int {
	return max(1, int(math.Ceil(c.Share*float64(c.Threshold))))
}

// RedisGuard is the Guard shared by every replica of one account.
type RedisGuard struct {
	client redis.UniversalClient
	key    string
	cfg    GuardConfig
}

var _ Guard = (*RedisGuard)(nil)

// NewRedisGuard returns the shared guard of account on client.
func NewRedisGuard(client redis.UniversalClient, account string, cfg GuardConfig) (*RedisGuard, error) {
	if client == nil {
		return nil, errors.New("dispatch: guard: redis client is nil")
	}
	if account == "" || strings.ContainsAny(account, "{}") {
		return nil, fmt.Errorf("dispatch: guard: account %q must be non-empty and free of braces (it is a Cluster hash tag)", account)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &RedisGuard{client: client, key: newDispatchKeys(account).throttles(), cfg: cfg}, nil
}

// guardScript trims the 429 log to the window and optionally records one.
//
//	KEYS[1]  ZSET of 429s: member "<µs>:<nonce>", score Redis time in µs
//	ARGV[1]  window, µs
//	ARGV[2]  nonce of the 429 to record; '' only counts
//
// Returns the number of 429s within the window after the call. Redis TIME is
// the only clock, so replicas with skewed clocks share one window. The key
// expires one window after the last 429.
var guardScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now - window))
if ARGV[2] ~= '' then
  redis.call('ZADD', KEYS[1], string.format('%d', now), string.format('%d', now) .. ':' .. ARGV[2])
  redis.call('PEXPIRE', KEYS[1], string.format('%d', math.ceil(window / 1000)))
end
return redis.call('ZCARD', KEYS[1])
`)

func (g *RedisGuard) run(ctx context.Context, nonce string) (int, error) {
	n, err := guardScript.Run(ctx, g.client, []string{g.key}, g.cfg.Window.Microseconds(), nonce).Int()
	if err != nil {
		return 0, fmt.Errorf("dispatch: guard on redis: %w", err)
	}
	return n, nil
}

// Record429 records one 429 on Redis time.
func (g *RedisGuard) Record429(ctx context.Context) (int, error) { return g.run(ctx, rand.Text()) }

// Count returns the 429s in the window on Redis time.
func (g *RedisGuard) Count(ctx context.Context) (int, error) { return g.run(ctx, "") }

// ActivateAt is ceil(Share · Threshold).
func (g *RedisGuard) ActivateAt() int { return g.cfg.activateAt() }

// LocalGuard counts 429s of this process only: embedded mode, one replica.
type LocalGuard struct {
	cfg GuardConfig
	now func() time.Time

	mu    sync.Mutex
	times []time.Time // ascending
}

var _ Guard = (*LocalGuard)(nil)

// NewLocalGuard returns an in-memory guard.
func NewLocalGuard(cfg GuardConfig) (*LocalGuard, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &LocalGuard{cfg: cfg, now: time.Now}, nil
}

// trim drops 429s at least one window old. Callers hold mu.
func (g *LocalGuard) trim(now time.Time) {
	cut := now.Add(-g.cfg.Window)
	i := 0
	for i < len(g.times) && !g.times[i].After(cut) {
		i++
	}
	g.times = append(g.times[:0], g.times[i:]...)
}

// Record429 records one 429 now.
func (g *LocalGuard) Record429(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("dispatch: guard: %w", err)
	}
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.trim(now)
	g.times = append(g.times, now)
	return len(g.times), nil
}

// Count returns the 429s in the window.
func (g *LocalGuard) Count(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("dispatch: guard: %w", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.trim(g.now())
	return len(g.times), nil
}

// ActivateAt is ceil(Share · Threshold).
func (g *LocalGuard) ActivateAt() int { return g.cfg.activateAt() }
