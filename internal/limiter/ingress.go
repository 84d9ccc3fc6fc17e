package limiter

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/gcra"
)

// KeyLimiter is a single-key GCRA for admission (one key per producer): a
// request is allowed now or not at all, and a rejected request changes no
// counter, so a client retrying while limited is never locked out longer.
type KeyLimiter interface {
	Allow(ctx context.Context, key string, r Rate, cost int) (KeyDecision, error)
}

// KeyDecision is the answer of a KeyLimiter, shaped for the RateLimit-*
// headers: Remaining units could pass right now after this decision, and
// the key is back to its full burst after ResetAfter. RetryAfter (when not
// allowed) is the exact time after which the same request would pass.
type KeyDecision struct {
	Allowed    bool
	RetryAfter time.Duration
	Remaining  int
	ResetAfter time.Duration
}

// keyStep is one single-key decision, the Go twin of gcra.Lua. tat is
// the stored TAT (0 when none); newTAT is what an allowed request stores.
// A denied request must store nothing: storing newTAT anyway is the classic
// increment-before-check bug that keeps a retrying client locked out.
func keyStep(now, tat int64, p params, cost int64) (d KeyDecision, newTAT int64) {
	tat = max(tat, now)
	newTAT = tat + cost*p.interval
	if allowAt := newTAT - p.burst*p.interval; allowAt > now {
		return KeyDecision{
			RetryAfter: micros(allowAt - now),
			Remaining:  int((now + p.burst*p.interval - tat) / p.interval),
			ResetAfter: micros(tat - now),
		}, newTAT
	}
	return KeyDecision{
		Allowed:    true,
		Remaining:  int((now + p.burst*p.interval - newTAT) / p.interval),
		ResetAfter: micros(newTAT - now),
	}, newTAT
}

// gcraReach is the Go twin of gcra_reach: tat lowered to now +
// burst·interval, the furthest an allowed request leaves a key ahead on a
// clock that never steps back (see gcra.Lua). step calls it at now +
// reachMicros, as the reserve script does.
func gcraReach(now, tat int64, p params) int64 {
	return min(tat, now+p.burst*p.interval)
}

func checkKeyRequest(key string, r Rate, cost int) (params, error) {
	if key == "" {
		return params{}, fmt.Errorf("limiter: key is empty")
	}
	if cost < 1 {
		return params{}, fmt.Errorf("limiter: cost %d must be >= 1", cost)
	}
	p, err := toParams("key "+key, r)
	if err != nil {
		return params{}, err
	}
	if int64(cost) > p.burst {
		return params{}, ErrCostExceedsBurst
	}
	return p, nil
}

// LocalKeys is a KeyLimiter in one process (embedded mode). Safe for
// concurrent use.
type LocalKeys struct {
	clock func() int64

	mu        sync.Mutex
	tats      map[string]int64
	nextSweep int
}

var _ KeyLimiter = (*LocalKeys)(nil)

// NewLocalKeys returns an in-process KeyLimiter on a monotonic clock.
func NewLocalKeys() *LocalKeys {
	return &LocalKeys{clock: monotonicClock(), tats: make(map[string]int64), nextSweep: 1024}
}

// Allow decides cost units for key at rate r.
func (l *LocalKeys) Allow(ctx context.Context, key string, r Rate, cost int) (KeyDecision, error) {
	p, err := checkKeyRequest(key, r, cost)
	if err != nil {
		return KeyDecision{}, err
	}
	if err := ctx.Err(); err != nil {
		return KeyDecision{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	stored := l.tats[key]
	reached := gcraReach(now, stored, p)
	if reached < stored {
		l.tats[key] = reached // never on this monotonic clock; kept as the script keeps it
	}
	d, tat := keyStep(now, reached, p, int64(cost))
	if d.Allowed {
		l.tats[key] = tat
		l.sweep(now)
	}
	return d, nil
}

// sweep forgets keys whose schedule has run out (they are equal to absent),
// amortised: only when the map has doubled since the last sweep.
func (l *LocalKeys) sweep(now int64) {
	if len(l.tats) < l.nextSweep {
		return
	}
	for k, tat := range l.tats {
		if tat <= now {
			delete(l.tats, k)
		}
	}
	l.nextSweep = max(1024, 2*len(l.tats))
}

// RedisKeys is a KeyLimiter shared by every replica through Redis, with
// Redis TIME as the clock. Safe for concurrent use.
type RedisKeys struct {
	client redis.UniversalClient
	keys   keySet
}

var _ KeyLimiter = (*RedisKeys)(nil)

// NewRedisKeys returns a KeyLimiter on client whose keys live under the
// account's hash tag.
func NewRedisKeys(client redis.UniversalClient, account string) (*RedisKeys, error) {
	if client == nil {
		return nil, fmt.Errorf("limiter: redis client is nil")
	}
	keys, err := newKeySet(account)
	if err != nil {
		return nil, err
	}
	return &RedisKeys{client: client, keys: keys}, nil
}

// allowScript is gcra_allow on Redis TIME.
//
//	KEYS[1]  the key's TAT, Unix µs of Redis time
//	ARGV[1]  emission interval, µs;  ARGV[2] burst;  ARGV[3] cost (<= burst)
var allowScript = redis.NewScript(gcra.Lua + `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
return gcra_allow(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), now)
`)

// KeyArgs checks a request as Allow does and returns the arguments of
// gcra_allow for it: the emission interval in µs and the burst.
func KeyArgs(key string, r Rate, cost int) (interval, burst int64, err error) {
	p, err := checkKeyRequest(key, r, cost)
	return p.interval, p.burst, err
}

// KeyName is the Redis key of the limiter's key name (a producer), under
// the account's hash tag: what gcra_allow is given for it.
func (l *RedisKeys) KeyName(key string) string { return l.keys.ingress(key) }

// reachable reads one key in the account's slot (on a Cluster, the node
// that decides the quotas answers, not any node).
func (l *RedisKeys) reachable(ctx context.Context) error {
	return l.client.Exists(ctx, l.keys.pause()).Err()
}

// Allow decides cost units for key at rate r in one round trip.
func (l *RedisKeys) Allow(ctx context.Context, key string, r Rate, cost int) (KeyDecision, error) {
	p, err := checkKeyRequest(key, r, cost)
	if err != nil {
		return KeyDecision{}, err
	}
	res, err := allowScript.Run(ctx, l.client, []string{l.keys.ingress(key)}, p.interval, p.burst, cost).Int64Slice()
	if err != nil {
		return KeyDecision{}, fmt.Errorf("limiter: allow %s on redis: %w", key, err)
	}
	d, err := gcra.DecisionOf(res)
	if err != nil {
		return KeyDecision{}, fmt.Errorf("limiter: allow %s on redis: %w", key, err)
	}
	return KeyDecision(d), nil
}
