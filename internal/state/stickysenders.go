package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
)

// StickySenders remember, across every replica, which sender of a pool a
// recipient was last assigned (producers[].sender_pools), for a while
// after the last message to it. Keys are keyed hashes of the pool and the
// recipient (the caller hashes; a store never sees a number). An entry
// lives ttl after its last Stick or Set, so the store holds at most the
// recipients messaged within ttl; the local store is bounded by a count
// besides.
type StickySenders interface {
	// Stick returns, for each of keys, the sender it holds ("" when none)
	// and restarts its ttl; a key that holds none is made to hold
	// senders[i] for ttl. Atomic per key: of concurrent Sticks of a key
	// that holds none, one sets it and the others return its sender.
	Stick(ctx context.Context, keys, senders []string, ttl time.Duration) ([]string, error)
	// Set makes key hold sender for ttl, whatever it held.
	Set(ctx context.Context, key, sender string, ttl time.Duration) error
}

// MaxStickyBatch bounds the keys of one Stick.
const MaxStickyBatch = 1000

// ErrInvalidSticky is returned for a Stick whose keys and senders differ
// in number or exceed MaxStickyBatch, an empty sender or a ttl under 1 ms.
var ErrInvalidSticky = errors.New("state: sticky senders: one non-empty sender per key, at most 1000 keys, ttl >= 1ms")

func checkSticky(keys, senders []string, ttl time.Duration) error {
	if len(keys) != len(senders) || len(keys) > MaxStickyBatch || ttl < time.Millisecond {
		return ErrInvalidSticky
	}
	for i, k := range keys {
		if !ValidKey(k) {
			return ErrInvalidKey
		}
		if senders[i] == "" {
			return ErrInvalidSticky
		}
	}
	return nil
}

// RedisStickySenders keep one STRING per key under the account's tag,
// expiring ttl after its last use.
type RedisStickySenders struct{ onRedis }

var _ StickySenders = (*RedisStickySenders)(nil)

// NewRedisStickySenders returns the sticky senders of sp's account on c.
func NewRedisStickySenders(c redis.UniversalClient, sp keyspace.Space) (*RedisStickySenders, error) {
	return newOnRedis[RedisStickySenders](c, sp)
}

// stickScript keeps or sets each key's sender.
//
//	KEYS[i]    STRING, the sender a recipient of a pool holds
//	ARGV[1]    ttl, ms
//	ARGV[1+i]  the sender KEYS[i] is to hold when it holds none
//
// Returns, per key, the sender it held ("" when it held none and now holds
// ARGV[1+i]); every key expires ttl from now.
var stickScript = redis.NewScript(`
local out = {}
for i, k in ipairs(KEYS) do
  local v = redis.call('GET', k)
  if v then
    redis.call('PEXPIRE', k, ARGV[1])
    out[i] = v
  else
    redis.call('SET', k, ARGV[i + 1], 'PX', ARGV[1])
    out[i] = ''
  end
end
return out
`)

// Stick keeps or sets each key's sender on Redis.
func (s *RedisStickySenders) Stick(ctx context.Context, keys, senders []string, ttl time.Duration) ([]string, error) {
	if err := checkSticky(keys, senders, ttl); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("state: sticky senders: %w", err)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	ks := make([]string, len(keys))
	args := make([]any, 0, len(keys)+1)
	args = append(args, ttl.Milliseconds())
	for i, k := range keys {
		ks[i] = s.k.stickySender(k)
		args = append(args, senders[i])
	}
	res, err := stickScript.Run(ctx, s.c, ks, args...).StringSlice()
	if err == nil && len(res) != len(keys) {
		err = errors.New("unexpected reply")
	}
	if err != nil {
		return nil, fmt.Errorf("state: sticky senders on redis: %w", err)
	}
	return res, nil
}

// Set makes key hold sender on Redis.
func (s *RedisStickySenders) Set(ctx context.Context, key, sender string, ttl time.Duration) error {
	if err := checkSticky([]string{key}, []string{sender}, ttl); err != nil {
		return err
	}
	if err := s.c.Set(ctx, s.k.stickySender(key), sender, ttl).Err(); err != nil {
		return fmt.Errorf("state: sticky senders on redis: %w", err)
	}
	return nil
}

// MaxLocalSticky bounds the recipients a LocalStickySenders remembers at
// once. When it is full, expired entries are dropped; if that frees
// nothing, the eighth that expire soonest are forgotten (their recipients
// are assigned afresh).
const MaxLocalSticky = 1 << 17

// LocalStickySenders keep the entries in this process: embedded mode, one
// replica; they do not outlive it. Safe for concurrent use.
type LocalStickySenders struct {
	now func() time.Time
	max int

	mu      sync.Mutex
	entries map[string]localSticky
	evicted int
}

type localSticky struct {
	sender  string
	expires time.Time
}

var _ StickySenders = (*LocalStickySenders)(nil)

// NewLocalStickySenders returns an empty store of at most maxEntries
// recipients (0: MaxLocalSticky).
func NewLocalStickySenders(maxEntries int) *LocalStickySenders {
	if maxEntries <= 0 {
		maxEntries = MaxLocalSticky
	}
	return &LocalStickySenders{now: time.Now, max: maxEntries, entries: map[string]localSticky{}}
}

// Stick keeps or sets each key's sender in this process.
func (s *LocalStickySenders) Stick(ctx context.Context, keys, senders []string, ttl time.Duration) ([]string, error) {
	if err := checkSticky(keys, senders, ttl); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("state: sticky senders: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make([]string, len(keys))
	for i, k := range keys {
		e, ok := s.entries[k]
		if ok && e.expires.After(now) {
			out[i] = e.sender
			s.entries[k] = localSticky{e.sender, now.Add(ttl)}
			continue
		}
		s.put(k, senders[i], now, ttl)
	}
	return out, nil
}

// Set makes key hold sender in this process.
func (s *LocalStickySenders) Set(ctx context.Context, key, sender string, ttl time.Duration) error {
	if err := checkSticky([]string{key}, []string{sender}, ttl); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("state: sticky senders: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put(key, sender, s.now(), ttl)
	return nil
}

// put stores one entry, making room first when the store is full.
// Callers hold mu.
func (s *LocalStickySenders) put(key, sender string, now time.Time, ttl time.Duration) {
	if _, held := s.entries[key]; !held && len(s.entries) >= s.max {
		s.makeRoom(now)
	}
	s.entries[key] = localSticky{sender, now.Add(ttl)}
}

// makeRoom drops the expired entries, and when none is, the eighth that
// expire soonest. Callers hold mu.
func (s *LocalStickySenders) makeRoom(now time.Time) {
	for k, e := range s.entries {
		if !e.expires.After(now) {
			delete(s.entries, k)
		}
	}
	if len(s.entries) < s.max {
		return
	}
	type aged struct {
		key     string
		expires time.Time
	}
	all := make([]aged, 0, len(s.entries))
	for k, e := range s.entries {
		all = append(all, aged{k, e.expires})
	}
	slices.SortFunc(all, func(a, b aged) int { return a.expires.Compare(b.expires) })
	for _, a := range all[:max(len(all)/8, 1)] {
		delete(s.entries, a.key)
		s.evicted++
	}
}

// Len and Evicted are the entries held and those forgotten because the
// store was full.
func (s *LocalStickySenders) Len() (held, evicted int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries), s.evicted
}
