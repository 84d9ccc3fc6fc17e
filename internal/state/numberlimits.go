package state

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
)

// NumberLimits counts the OTPs sent to each number in a rolling window,
// across every replica: protection.otp_per_number. Keys are keyed hashes of
// numbers (the caller hashes; a store never sees a number). Taking is
// atomic: of concurrent Takes at the limit exactly the allowed number
// succeed, and a refused Take records nothing, so a number hammered while
// refused is free again one window after its last allowed OTP.
type NumberLimits interface {
	// Take records one OTP to key when fewer than limit were recorded in
	// the last window; otherwise it records nothing and returns false with
	// the time until the oldest leaves the window.
	Take(ctx context.Context, key string, limit int, window time.Duration) (ok bool, retryAfter time.Duration, err error)
}

// MaxNumberLimit bounds a NumberLimits limit: each number's window holds
// at most limit entries.
const MaxNumberLimit = 1000

// ErrInvalidLimit is returned for a limit or window out of range.
var ErrInvalidLimit = errors.New("state: number limit must be 1..1000 within a window of at least 1ms")

func checkNumberLimit(key string, limit int, window time.Duration) error {
	if !ValidKey(key) {
		return ErrInvalidKey
	}
	if limit < 1 || limit > MaxNumberLimit || window < time.Millisecond {
		return ErrInvalidLimit
	}
	return nil
}

// RedisNumberLimits keep one ZSET per number hash under the account's tag,
// on Redis time, expiring one window after its newest OTP.
type RedisNumberLimits struct {
	c redis.UniversalClient
	k keys
}

var _ NumberLimits = (*RedisNumberLimits)(nil)

// NewRedisNumberLimits returns the per-number windows of sp's account on c.
func NewRedisNumberLimits(c redis.UniversalClient, sp keyspace.Space) (*RedisNumberLimits, error) {
	if err := checkRedis(c, sp); err != nil {
		return nil, err
	}
	return &RedisNumberLimits{c: c, k: newKeys(sp)}, nil
}

// numberTakeScript takes one OTP of a number's window.
//
//	KEYS[1]  ZSET of OTPs: member "<µs>:<nonce>", score Redis time in µs
//	ARGV[1]  window, µs
//	ARGV[2]  limit
//	ARGV[3]  nonce
//
// Returns {1, 0} when recorded, or {0, µs until the oldest OTP leaves the
// window} when the window is full (nothing recorded, expiry unchanged).
var numberTakeScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now - window))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, tonumber(oldest[2]) + window - now}
end
redis.call('ZADD', KEYS[1], string.format('%d', now), string.format('%d', now) .. ':' .. ARGV[3])
redis.call('PEXPIRE', KEYS[1], string.format('%d', math.ceil(window / 1000)))
return {1, 0}
`)

// Take records one OTP to key on Redis time.
func (s *RedisNumberLimits) Take(ctx context.Context, key string, limit int, window time.Duration) (bool, time.Duration, error) {
	if err := checkNumberLimit(key, limit, window); err != nil {
		return false, 0, err
	}
	if err := ctx.Err(); err != nil {
		return false, 0, fmt.Errorf("state: number limits: %w", err)
	}
	res, err := numberTakeScript.Run(ctx, s.c, []string{s.k.otpNumber(key)}, window.Microseconds(), limit, rand.Text()).Int64Slice()
	if err != nil || len(res) != 2 {
		return false, 0, fmt.Errorf("state: number limits on redis: %w", errors.Join(err, errors.New("unexpected reply")))
	}
	if res[0] == 1 {
		return true, 0, nil
	}
	return false, max(time.Duration(res[1])*time.Microsecond, time.Millisecond), nil
}

// MaxLocalNumbers bounds the numbers a LocalNumberLimits tracks at once.
// When it is full, numbers whose window is empty are dropped; if none is,
// the new number is refused as if at its limit (fail closed: a flood of
// distinct numbers must not evict the hammered one's count).
const MaxLocalNumbers = 1 << 17

// LocalNumberLimits keep the windows in this process: embedded mode, one
// replica. Safe for concurrent use.
type LocalNumberLimits struct {
	now func() time.Time
	max int

	mu   sync.Mutex
	nums map[string][]time.Time // ascending, at most limit each
}

var _ NumberLimits = (*LocalNumberLimits)(nil)

// NewLocalNumberLimits returns empty windows for at most maxNumbers
// numbers (0: MaxLocalNumbers).
func NewLocalNumberLimits(maxNumbers int) *LocalNumberLimits {
	if maxNumbers <= 0 {
		maxNumbers = MaxLocalNumbers
	}
	return &LocalNumberLimits{now: time.Now, max: maxNumbers, nums: map[string][]time.Time{}}
}

// Take records one OTP to key now.
func (s *LocalNumberLimits) Take(ctx context.Context, key string, limit int, window time.Duration) (bool, time.Duration, error) {
	if err := checkNumberLimit(key, limit, window); err != nil {
		return false, 0, err
	}
	if err := ctx.Err(); err != nil {
		return false, 0, fmt.Errorf("state: number limits: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	ts := live(s.nums[key], now, window)
	if len(ts) >= limit {
		s.nums[key] = ts
		return false, max(ts[len(ts)-limit].Add(window).Sub(now), time.Millisecond), nil
	}
	if _, held := s.nums[key]; !held && len(s.nums) >= s.max {
		for k, v := range s.nums {
			if len(live(v, now, window)) == 0 {
				delete(s.nums, k)
			}
		}
		if len(s.nums) >= s.max {
			return false, window, nil
		}
	}
	s.nums[key] = append(ts, now)
	return true, 0, nil
}

// live is ts without the times at least window before now.
func live(ts []time.Time, now time.Time, window time.Duration) []time.Time {
	cut := now.Add(-window)
	i := 0
	for i < len(ts) && !ts[i].After(cut) {
		i++
	}
	return ts[i:]
}
