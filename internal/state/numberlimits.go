package state

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
// refused is free again one window after its last allowed OTP. An OTP
// refused after its Take (by the ingress quota, or not sent at all) gives
// its entry back (Return), so that only OTPs the gateway let through count.
type NumberLimits interface {
	// Take records one OTP to key when fewer than limit were recorded in
	// the last window and returns its ticket; otherwise it records nothing
	// and returns an empty ticket with the time until the oldest leaves
	// the window.
	Take(ctx context.Context, key string, limit int, window time.Duration) (ticket string, retryAfter time.Duration, err error)
	// Return removes the OTP Take recorded under ticket; one already gone
	// (its window passed, returned before) is no error.
	Return(ctx context.Context, key, ticket string) error
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
type RedisNumberLimits struct{ onRedis }

var _ NumberLimits = (*RedisNumberLimits)(nil)

// NewRedisNumberLimits returns the per-number windows of sp's account on c.
func NewRedisNumberLimits(c redis.UniversalClient, sp keyspace.Space) (*RedisNumberLimits, error) {
	return newOnRedis[RedisNumberLimits](c, sp)
}

// numberTakeScript takes one OTP of a number's window.
//
//	KEYS[1]  ZSET of OTPs: member "<µs>:<nonce>", score Redis time in µs
//	ARGV[1]  window, µs
//	ARGV[2]  limit
//	ARGV[3]  nonce
//
// Returns {1, 0, member} when recorded, or {0, µs until the oldest OTP
// leaves the window} when the window is full (nothing recorded, expiry
// unchanged).
var numberTakeScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local window = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now - window))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, tonumber(oldest[2]) + window - now}
end
local member = string.format('%d', now) .. ':' .. ARGV[3]
redis.call('ZADD', KEYS[1], string.format('%d', now), member)
redis.call('PEXPIRE', KEYS[1], string.format('%d', math.ceil(window / 1000)))
return {1, 0, member}
`)

// numberReturnScript removes one OTP (ARGV[1], a member numberTakeScript
// returned) from KEYS[1], and the key when it is left empty.
var numberReturnScript = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[1]) end
return 1
`)

// Take records one OTP to key on Redis time.
func (s *RedisNumberLimits) Take(ctx context.Context, key string, limit int, window time.Duration) (string, time.Duration, error) {
	if err := checkNumberLimit(key, limit, window); err != nil {
		return "", 0, err
	}
	if err := ctx.Err(); err != nil {
		return "", 0, fmt.Errorf("state: number limits: %w", err)
	}
	res, err := numberTakeScript.Run(ctx, s.c, []string{s.k.otpNumber(key)}, window.Microseconds(), limit, rand.Text()).Slice()
	if err != nil || len(res) < 2 {
		return "", 0, fmt.Errorf("state: number limits on redis: %w", errors.Join(err, errors.New("unexpected reply")))
	}
	if ok, _ := res[0].(int64); ok == 1 {
		ticket, _ := res[len(res)-1].(string)
		if len(res) != 3 || ticket == "" {
			return "", 0, errors.New("state: number limits on redis: unexpected reply")
		}
		return ticket, 0, nil
	}
	after, _ := res[1].(int64)
	return "", max(time.Duration(after)*time.Microsecond, time.Millisecond), nil
}

// Return removes the OTP recorded under ticket.
func (s *RedisNumberLimits) Return(ctx context.Context, key, ticket string) error {
	if !ValidKey(key) {
		return ErrInvalidKey
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("state: number limits: %w", err)
	}
	if ticket == "" {
		return nil
	}
	if err := numberReturnScript.Run(ctx, s.c, []string{s.k.otpNumber(key)}, ticket).Err(); err != nil {
		return fmt.Errorf("state: number limits on redis: %w", err)
	}
	return nil
}

// MaxLocalNumbers bounds the numbers a LocalNumberLimits tracks at once.
// When it is full, numbers whose window is empty are dropped; if that
// frees nothing, the eighth of the numbers whose newest OTP is oldest are
// forgotten (fail open for the numbers least recently sent to). Filling
// it takes that many OTPs the gateway let through, each a real send
// within the window: refused requests record nothing.
const MaxLocalNumbers = 1 << 17

// LocalNumberLimits keep the windows in this process: embedded mode, one
// replica. Safe for concurrent use.
type LocalNumberLimits struct {
	now func() time.Time
	max int

	mu      sync.Mutex
	seq     uint64
	nums    map[string][]localOTP // ascending, at most limit each
	evicted int                   // numbers forgotten while full
}

type localOTP struct {
	at  time.Time
	seq uint64 // its ticket
}

var _ NumberLimits = (*LocalNumberLimits)(nil)

// NewLocalNumberLimits returns empty windows for at most maxNumbers
// numbers (0: MaxLocalNumbers).
func NewLocalNumberLimits(maxNumbers int) *LocalNumberLimits {
	if maxNumbers <= 0 {
		maxNumbers = MaxLocalNumbers
	}
	return &LocalNumberLimits{now: time.Now, max: maxNumbers, nums: map[string][]localOTP{}}
}

// Take records one OTP to key now.
func (s *LocalNumberLimits) Take(ctx context.Context, key string, limit int, window time.Duration) (string, time.Duration, error) {
	if err := checkNumberLimit(key, limit, window); err != nil {
		return "", 0, err
	}
	if err := ctx.Err(); err != nil {
		return "", 0, fmt.Errorf("state: number limits: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	ts := live(s.nums[key], now, window)
	if len(ts) >= limit {
		s.nums[key] = ts
		return "", max(ts[len(ts)-limit].at.Add(window).Sub(now), time.Millisecond), nil
	}
	if _, held := s.nums[key]; !held && len(s.nums) >= s.max {
		s.makeRoom(now, window)
	}
	s.seq++
	s.nums[key] = append(ts, localOTP{at: now, seq: s.seq})
	return strconv.FormatUint(s.seq, 10), 0, nil
}

// makeRoom drops the numbers whose window is empty, and when none is, the
// eighth whose newest OTP is oldest. Callers hold mu.
func (s *LocalNumberLimits) makeRoom(now time.Time, window time.Duration) {
	for k, v := range s.nums {
		if len(live(v, now, window)) == 0 {
			delete(s.nums, k)
		}
	}
	if len(s.nums) < s.max {
		return
	}
	type aged struct {
		key    string
		newest time.Time
	}
	all := make([]aged, 0, len(s.nums))
	for k, v := range s.nums {
		all = append(all, aged{k, v[len(v)-1].at})
	}
	slices.SortFunc(all, func(a, b aged) int { return a.newest.Compare(b.newest) })
	for _, a := range all[:max(len(all)/8, 1)] {
		delete(s.nums, a.key)
		s.evicted++
	}
}

// Return removes the OTP recorded under ticket.
func (s *LocalNumberLimits) Return(ctx context.Context, key, ticket string) error {
	if !ValidKey(key) {
		return ErrInvalidKey
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("state: number limits: %w", err)
	}
	seq, err := strconv.ParseUint(ticket, 10, 64)
	if err != nil {
		return nil // not one of ours: nothing to give back
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ts := s.nums[key]
	for i, o := range ts {
		if o.seq == seq {
			ts = slices.Delete(ts, i, i+1)
			break
		}
	}
	if len(ts) == 0 {
		delete(s.nums, key)
	} else {
		s.nums[key] = ts
	}
	return nil
}

// Evicted returns how many numbers were forgotten because the table was
// full (their counts restart).
func (s *LocalNumberLimits) Evicted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.evicted
}

// live is ts without the OTPs at least window before now.
func live(ts []localOTP, now time.Time, window time.Duration) []localOTP {
	cut := now.Add(-window)
	i := 0
	for i < len(ts) && !ts[i].at.After(cut) {
		i++
	}
	return ts[i:]
}
