package state

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
)

// ScopedPauses are the operator's pauses of one part of the traffic (a
// class), beside the pause of everything (Pause). Each scope is set and
// cleared on its own; a later Set of a scope replaces an earlier one.
// Scopes are short names the caller chooses from a bounded set (the
// gateway's classes); the store refuses more than MaxScopedPauses at once.
type ScopedPauses interface {
	// Set pauses scope for d (0: until Clear) with a reason.
	Set(ctx context.Context, scope string, d time.Duration, reason string) error
	// Clear lifts the pause of scope (none: nothing changes).
	Clear(ctx context.Context, scope string) error
	// All reads every scope paused now.
	All(ctx context.Context) (map[string]PauseStatus, error)
}

// MaxScopedPauses bounds how many scopes are paused at once, and
// MaxPauseScope the length of a scope's name.
const (
	MaxScopedPauses = 64
	MaxPauseScope   = 64
)

// ClassScope names the scope of a class's pause.
func ClassScope(class string) string { return "class:" + class }

// ProducerScope names the scope of a producer's pause.
func ProducerScope(producer string) string { return "producer:" + producer }

func checkScope(scope string) error {
	if scope == "" || len(scope) > MaxPauseScope || strings.ContainsAny(scope, "|\x00") {
		return fmt.Errorf("state: pause scope must be 1 to %d bytes without '|'", MaxPauseScope)
	}
	return nil
}

// scopedPauses is the HASH of scoped pauses: field the scope, value
// "<until ms, Redis TIME; 0: until cleared>|<reason>".
func (k keys) scopedPauses() string { return k.api + "pause:scoped" }

// RedisScopedPauses are shared by every replica: one HASH, read in one
// round trip, every time taken from Redis TIME.
type RedisScopedPauses struct{ onRedis }

var _ ScopedPauses = (*RedisScopedPauses)(nil)

// NewRedisScopedPauses returns the scoped pauses of sp's account on c.
func NewRedisScopedPauses(c redis.UniversalClient, sp keyspace.Space) (*RedisScopedPauses, error) {
	return newOnRedis[RedisScopedPauses](c, sp)
}

// scopedSetScript: KEYS[1] the HASH; ARGV scope, d in ms (0: until
// cleared), reason, the most scopes. Returns 0 when the HASH is full.
var scopedSetScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then
  return 0
end
local d = tonumber(ARGV[2])
local untilms = 0
if d > 0 then untilms = now + d end
redis.call('HSET', KEYS[1], ARGV[1], untilms .. '|' .. ARGV[3])
return 1
`)

// scopedAllScript: KEYS[1] the HASH. Returns Redis TIME in ms and the
// HASH's fields and values; fields whose pause ended are deleted.
var scopedAllScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
local out = {tostring(now)}
for i = 1, #all, 2 do
  local u = tonumber(string.match(all[i+1], '^(%d+)|'))
  if u ~= nil and u ~= 0 and u <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    out[#out+1] = all[i]
    out[#out+1] = all[i+1]
  end
end
return out
`)

// Set pauses scope for d (0: until Clear).
func (p *RedisScopedPauses) Set(ctx context.Context, scope string, d time.Duration, reason string) error {
	if err := checkScope(scope); err != nil {
		return err
	}
	if err := checkPause(ctx, d, reason); err != nil {
		return fmt.Errorf("state: pause: %w", err)
	}
	n, err := scopedSetScript.Run(ctx, p.c, []string{p.k.scopedPauses()}, scope, d.Milliseconds(), reason, MaxScopedPauses).Int()
	if err != nil {
		return fmt.Errorf("state: pause on redis: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("state: pause: %d scopes are paused already", MaxScopedPauses)
	}
	return nil
}

// Clear deletes scope's field.
func (p *RedisScopedPauses) Clear(ctx context.Context, scope string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("state: resume: %w", err)
	}
	if err := p.c.HDel(ctx, p.k.scopedPauses(), scope).Err(); err != nil {
		return fmt.Errorf("state: resume on redis: %w", err)
	}
	return nil
}

// Key is the HASH of the scoped pauses: a queue's set-aside script reads
// a producer's field in it (queue.Shelf).
func (p *RedisScopedPauses) Key() string { return p.k.scopedPauses() }

// All reads the HASH in one round trip.
func (p *RedisScopedPauses) All(ctx context.Context) (map[string]PauseStatus, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("state: read pauses: %w", err)
	}
	vals, err := scopedAllScript.Run(ctx, p.c, []string{p.k.scopedPauses()}).StringSlice()
	if err != nil || len(vals) == 0 {
		return nil, fmt.Errorf("state: read pauses on redis: %w", err)
	}
	now, err := strconv.ParseInt(vals[0], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("state: read pauses on redis: time %q", vals[0])
	}
	out := make(map[string]PauseStatus, (len(vals)-1)/2)
	for i := 1; i+1 < len(vals); i += 2 {
		until, reason, ok := strings.Cut(vals[i+1], "|")
		u, err := strconv.ParseInt(until, 10, 64)
		if !ok || err != nil {
			continue // not written by Set: ignored, as if not paused
		}
		st := PauseStatus{On: true, Reason: reason}
		if u != 0 {
			st.Remaining = time.Duration(u-now) * time.Millisecond
		}
		out[vals[i]] = st
	}
	return out, nil
}

// LocalScopedPauses are this process's (embedded mode). Safe for
// concurrent use.
type LocalScopedPauses struct {
	now func() time.Time

	mu sync.Mutex
	m  map[string]*LocalPause
}

var _ ScopedPauses = (*LocalScopedPauses)(nil)

// NewLocalScopedPauses returns scoped pauses with none set.
func NewLocalScopedPauses() *LocalScopedPauses {
	return &LocalScopedPauses{now: time.Now, m: map[string]*LocalPause{}}
}

// Set pauses scope for d (0: until Clear).
func (p *LocalScopedPauses) Set(ctx context.Context, scope string, d time.Duration, reason string) error {
	if err := checkScope(scope); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	lp := p.m[scope]
	if lp == nil {
		if len(p.m) >= MaxScopedPauses {
			return fmt.Errorf("state: pause: %d scopes are paused already", MaxScopedPauses)
		}
		lp = &LocalPause{now: p.now}
	}
	if err := lp.Set(ctx, d, reason); err != nil {
		return err
	}
	p.m[scope] = lp
	return nil
}

// Clear lifts the pause of scope.
func (p *LocalScopedPauses) Clear(ctx context.Context, scope string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("state: resume: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, scope)
	return nil
}

// All reads every scope paused now; ended ones are forgotten.
func (p *LocalScopedPauses) All(ctx context.Context) (map[string]PauseStatus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]PauseStatus, len(p.m))
	for s, lp := range p.m {
		st, err := lp.Get(ctx)
		if err != nil {
			return nil, err
		}
		if !st.On {
			delete(p.m, s)
			continue
		}
		out[s] = st
	}
	return out, nil
}
