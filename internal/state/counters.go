package state

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
)

// Counters are account-wide cumulative counters: a fixed set of named int64
// fields, given at construction, to which every replica adds its own
// increments. The set is fixed so that no caller can grow the store.
type Counters interface {
	// Add adds delta (fields of the set; a zero value changes nothing) and
	// returns every field of the set after it, and since when the counters
	// count (the first Add ever).
	Add(ctx context.Context, delta map[string]int64) (map[string]int64, time.Time, error)
	// Read returns every field of the set and since when they count (zero
	// when nothing was ever added).
	Read(ctx context.Context) (map[string]int64, time.Time, error)
}

// MaxCounterFields bounds the field set of a Counters store.
const MaxCounterFields = 256

// ErrUnknownField is returned for a delta naming a field outside the set.
var ErrUnknownField = errors.New("state: unknown counter field")

// sinceField is the hash field holding when the counters began (Unix ms);
// no counter may take its name.
const sinceField = "since_ms"

// fieldSet checks and copies a field set.
func fieldSet(fields []string) (map[string]bool, error) {
	if len(fields) == 0 || len(fields) > MaxCounterFields {
		return nil, fmt.Errorf("state: %d counter fields, want 1 to %d", len(fields), MaxCounterFields)
	}
	set := make(map[string]bool, len(fields))
	for _, f := range fields {
		if f == "" || f == sinceField || set[f] {
			return nil, fmt.Errorf("state: counter field %q is empty, reserved or repeated", f)
		}
		set[f] = true
	}
	return set, nil
}

func checkDelta(ctx context.Context, set map[string]bool, delta map[string]int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for f := range delta {
		if !set[f] {
			return fmt.Errorf("%w %q", ErrUnknownField, f)
		}
	}
	return nil
}

// RedisCounters keep the counters in one Redis hash under the account's
// hash tag; every replica adds to it.
type RedisCounters struct {
	c      redis.UniversalClient
	key    string
	fields map[string]bool
	now    func() time.Time
}

var _ Counters = (*RedisCounters)(nil)

// NewRedisCounters returns the counters of sp's account on c with the given
// field set.
func NewRedisCounters(c redis.UniversalClient, sp keyspace.Space, fields []string) (*RedisCounters, error) {
	if err := checkRedis(c, sp); err != nil {
		return nil, err
	}
	set, err := fieldSet(fields)
	if err != nil {
		return nil, err
	}
	return &RedisCounters{c: c, key: newKeys(sp).counters(), fields: set, now: time.Now}, nil
}

// Add increments the hash and reads it back in one transaction on one key.
// The since field takes the first adder's clock: it is shown to operators,
// no decision reads it.
func (s *RedisCounters) Add(ctx context.Context, delta map[string]int64) (map[string]int64, time.Time, error) {
	if err := checkDelta(ctx, s.fields, delta); err != nil {
		return nil, time.Time{}, fmt.Errorf("state: add counters: %w", err)
	}
	pipe := s.c.TxPipeline()
	for f, v := range delta {
		if v != 0 {
			pipe.HIncrBy(ctx, s.key, f, v)
		}
	}
	pipe.HSetNX(ctx, s.key, sinceField, s.now().UnixMilli())
	all := pipe.HGetAll(ctx, s.key)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, time.Time{}, fmt.Errorf("state: add counters on redis: %w", err)
	}
	out, since := s.parse(all.Val())
	return out, since, nil
}

// Read reads the hash.
func (s *RedisCounters) Read(ctx context.Context) (map[string]int64, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("state: read counters: %w", err)
	}
	all, err := s.c.HGetAll(ctx, s.key).Result()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("state: read counters on redis: %w", err)
	}
	out, since := s.parse(all)
	return out, since, nil
}

// parse keeps the fields of the set (absent or unreadable: 0).
func (s *RedisCounters) parse(h map[string]string) (map[string]int64, time.Time) {
	out := make(map[string]int64, len(s.fields))
	for f := range s.fields {
		v, _ := strconv.ParseInt(h[f], 10, 64)
		out[f] = v
	}
	var since time.Time
	if ms, err := strconv.ParseInt(h[sinceField], 10, 64); err == nil {
		since = time.UnixMilli(ms).UTC()
	}
	return out, since
}

// LocalCounters are the counters of this process (embedded mode). Safe for
// concurrent use.
type LocalCounters struct {
	now    func() time.Time
	fields map[string]bool

	mu     sync.Mutex
	values map[string]int64 // exactly the field set
	since  time.Time
}

var _ Counters = (*LocalCounters)(nil)

// NewLocalCounters returns zeroed counters with the given field set.
func NewLocalCounters(fields []string) (*LocalCounters, error) {
	set, err := fieldSet(fields)
	if err != nil {
		return nil, err
	}
	values := make(map[string]int64, len(set))
	for f := range set {
		values[f] = 0
	}
	return &LocalCounters{now: time.Now, fields: set, values: values}, nil
}

// Add adds delta.
func (s *LocalCounters) Add(ctx context.Context, delta map[string]int64) (map[string]int64, time.Time, error) {
	if err := checkDelta(ctx, s.fields, delta); err != nil {
		return nil, time.Time{}, fmt.Errorf("state: add counters: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for f, v := range delta {
		s.values[f] += v
	}
	if s.since.IsZero() {
		s.since = s.now().Truncate(time.Millisecond).UTC()
	}
	return maps.Clone(s.values), s.since, nil
}

// Read returns the counters.
func (s *LocalCounters) Read(ctx context.Context) (map[string]int64, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("state: read counters: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.values), s.since, nil
}
