package state

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
)

// Throttles is the rolling window of provider 429s the suspension guard
// counts (its policy, when to slow down, is dispatch's). A 429 stays in the
// window for exactly the window's length.
type Throttles interface {
	// Record429 records one 429 now and returns how many the window holds,
	// this one included.
	Record429(ctx context.Context) (int, error)
	// Count returns how many 429s the window holds now.
	Count(ctx context.Context) (int, error)
}

// checkDuration is the check of every store's durations (a window, a
// lock's or an answer's lifetime): Redis keeps them in whole milliseconds.
// what names the duration in the error.
func checkDuration(what string, d time.Duration) error {
	if d < time.Millisecond {
		return fmt.Errorf("state: %s %s must be at least 1ms", what, d)
	}
	return nil
}

// RedisThrottles share the window between every replica of an account: a
// ZSET of 429s on Redis time, so replicas with skewed clocks share one
// window.
type RedisThrottles struct {
	c      redis.UniversalClient
	key    string
	window time.Duration
}

var _ Throttles = (*RedisThrottles)(nil)

// NewRedisThrottles returns the window of sp's account on c.
func NewRedisThrottles(c redis.UniversalClient, sp keyspace.Space, window time.Duration) (*RedisThrottles, error) {
	if err := checkRedis(c, sp); err != nil {
		return nil, err
	}
	if err := checkDuration("throttle window", window); err != nil {
		return nil, err
	}
	return &RedisThrottles{c: c, key: newKeys(sp).throttles(), window: window}, nil
}

// throttlesScript trims the 429 log to the window and optionally records one.
//
//	KEYS[1]  ZSET of 429s: member "<µs>:<nonce>", score Redis time in µs
//	ARGV[1]  window, µs
//	ARGV[2]  nonce of the 429 to record; '' only counts
//
// Returns the number of 429s within the window after the call: those
// scored after now − window, the new one included. Redis TIME is the only
// clock. Recording sets the key to expire one window (rounded up to a
// millisecond) after this 429; counting never changes the expiry.
var throttlesScript = redis.NewScript(`
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

func (g *RedisThrottles) run(ctx context.Context, nonce string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("state: throttles: %w", err)
	}
	n, err := throttlesScript.Run(ctx, g.c, []string{g.key}, g.window.Microseconds(), nonce).Int()
	if err != nil {
		return 0, fmt.Errorf("state: throttles on redis: %w", err)
	}
	return n, nil
}

// Record429 records one 429 on Redis time.
func (g *RedisThrottles) Record429(ctx context.Context) (int, error) { return g.run(ctx, rand.Text()) }

// Count returns the 429s in the window on Redis time.
func (g *RedisThrottles) Count(ctx context.Context) (int, error) { return g.run(ctx, "") }

// MaxLocalThrottles bounds the 429s a LocalThrottles holds; past it the
// oldest go first, so the count saturates there (far above any suspension
// threshold).
const MaxLocalThrottles = 1 << 16

// LocalThrottles count the 429s of this process only: embedded mode, one
// replica. Safe for concurrent use.
type LocalThrottles struct {
	window time.Duration
	now    func() time.Time

	mu    sync.Mutex
	times []time.Time // ascending
}

var _ Throttles = (*LocalThrottles)(nil)

// NewLocalThrottles returns an empty in-memory window.
func NewLocalThrottles(window time.Duration) (*LocalThrottles, error) {
	if err := checkDuration("throttle window", window); err != nil {
		return nil, err
	}
	return &LocalThrottles{window: window, now: time.Now}, nil
}

// trim drops 429s at least one window old and the oldest past the bound.
// Callers hold mu.
func (g *LocalThrottles) trim(now time.Time) {
	cut := now.Add(-g.window)
	i := 0
	for i < len(g.times) && !g.times[i].After(cut) {
		i++
	}
	i = max(i, len(g.times)-MaxLocalThrottles)
	// Reslicing copies nothing; append reallocates (copying only what is
	// held) once the array's tail is used up, so a trim costs O(1)
	// amortised and the array at most about twice the bound.
	g.times = g.times[i:]
}

// Record429 records one 429 now.
func (g *LocalThrottles) Record429(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("state: throttles: %w", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	g.times = append(g.times, now)
	g.trim(now)
	return len(g.times), nil
}

// Count returns the 429s in the window.
func (g *LocalThrottles) Count(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("state: throttles: %w", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.trim(g.now())
	return len(g.times), nil
}
