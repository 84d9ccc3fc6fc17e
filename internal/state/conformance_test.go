package state_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
	"smsgw/internal/redistest"
	"smsgw/internal/state"
	"smsgw/internal/state/statetest"
)

// TestConformanceLocal runs the suite against the in-process stores: one
// store shared by every handle, as one process is one replica.
func TestConformanceLocal(t *testing.T) {
	t.Parallel()
	statetest.Run(t, statetest.Harness{
		Idempotency: func(t *testing.T, window time.Duration, n int) []state.Idempotency {
			s, err := state.NewLocalIdempotency(window, 0)
			if err != nil {
				t.Fatal(err)
			}
			return repeat[state.Idempotency](s, n)
		},
		Pause: func(t *testing.T, n int) []state.Pause { return repeat[state.Pause](state.NewLocalPause(), n) },
		Counters: func(t *testing.T, fields []string, n int) []state.Counters {
			s, err := state.NewLocalCounters(fields)
			if err != nil {
				t.Fatal(err)
			}
			return repeat[state.Counters](s, n)
		},
		Throttles: func(t *testing.T, window time.Duration, n int) []state.Throttles {
			s, err := state.NewLocalThrottles(window)
			if err != nil {
				t.Fatal(err)
			}
			return repeat[state.Throttles](s, n)
		},
		NumberLimits: func(_ *testing.T, n int) []state.NumberLimits {
			return repeat[state.NumberLimits](state.NewLocalNumberLimits(0), n)
		},
		Suppressions: func(t *testing.T, maxEntries, n int) []state.Suppressions {
			s, err := state.OpenLocalSuppressions(t.TempDir(), maxEntries)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return repeat[state.Suppressions](s, n)
		},
		StickySenders: func(_ *testing.T, n int) []state.StickySenders {
			return repeat[state.StickySenders](state.NewLocalStickySenders(0), n)
		},
	})
}

// TestConformanceRedis runs the suite against the shared Redis: every
// handle has its own client (its own connections) on one fresh account.
func TestConformanceRedis(t *testing.T) {
	t.Parallel()
	redistest.Addr(t)
	statetest.Run(t, redisHarness(func(t *testing.T) redis.UniversalClient { return redistest.Client(t) }, func(t *testing.T, sp keyspace.Space) { redistest.DeleteTagged(t, sp.Tag()) }))
}

// TestConformanceCluster runs the suite against a real 3-master Redis
// Cluster: a script whose keys spanned slots would fail with CROSSSLOT, and
// the accounts of the cases land on different masters.
func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	addrs := redistest.StartCluster(t)
	// The cluster's servers, and every key with them, go when the test ends.
	statetest.Run(t, redisHarness(func(t *testing.T) redis.UniversalClient { return redistest.ClusterClient(t, addrs) }, nil))
}

// redisHarness reaches the Redis stores through client; cleanup, when set,
// removes an account's keys when its test ends.
func redisHarness(client func(t *testing.T) redis.UniversalClient, cleanup func(t *testing.T, sp keyspace.Space)) statetest.Harness {
	space := func(t *testing.T) keyspace.Space {
		sp, err := keyspace.New(redistest.Prefix(t))
		if err != nil {
			t.Fatal(err)
		}
		if cleanup != nil {
			t.Cleanup(func() { cleanup(t, sp) })
		}
		return sp
	}
	return statetest.Harness{
		Idempotency: func(t *testing.T, window time.Duration, n int) []state.Idempotency {
			return handles(t, n, space(t), client, func(c redis.UniversalClient, sp keyspace.Space) (state.Idempotency, error) {
				return state.NewRedisIdempotency(c, sp, window)
			})
		},
		Pause: func(t *testing.T, n int) []state.Pause {
			return handles(t, n, space(t), client, func(c redis.UniversalClient, sp keyspace.Space) (state.Pause, error) {
				return state.NewRedisPause(c, sp)
			})
		},
		Counters: func(t *testing.T, fields []string, n int) []state.Counters {
			return handles(t, n, space(t), client, func(c redis.UniversalClient, sp keyspace.Space) (state.Counters, error) {
				return state.NewRedisCounters(c, sp, fields)
			})
		},
		Throttles: func(t *testing.T, window time.Duration, n int) []state.Throttles {
			return handles(t, n, space(t), client, func(c redis.UniversalClient, sp keyspace.Space) (state.Throttles, error) {
				return state.NewRedisThrottles(c, sp, window)
			})
		},
		NumberLimits: func(t *testing.T, n int) []state.NumberLimits {
			return handles(t, n, space(t), client, func(c redis.UniversalClient, sp keyspace.Space) (state.NumberLimits, error) {
				return state.NewRedisNumberLimits(c, sp)
			})
		},
		Suppressions: func(t *testing.T, maxEntries, n int) []state.Suppressions {
			return handles(t, n, space(t), client, func(c redis.UniversalClient, sp keyspace.Space) (state.Suppressions, error) {
				return state.NewRedisSuppressions(c, sp, maxEntries)
			})
		},
		StickySenders: func(t *testing.T, n int) []state.StickySenders {
			return handles(t, n, space(t), client, func(c redis.UniversalClient, sp keyspace.Space) (state.StickySenders, error) {
				return state.NewRedisStickySenders(c, sp)
			})
		},
	}
}

// handles builds n stores of one account, each on its own client.
func handles[S any](t *testing.T, n int, sp keyspace.Space, client func(t *testing.T) redis.UniversalClient,
	build func(redis.UniversalClient, keyspace.Space) (S, error)) []S {
	t.Helper()
	out := make([]S, n)
	for i := range out {
		s, err := build(client(t), sp)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = s
	}
	return out
}

func repeat[S any](s S, n int) []S {
	out := make([]S, n)
	for i := range out {
		out[i] = s
	}
	return out
}
