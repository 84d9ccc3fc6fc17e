package history

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
	"smsgw/internal/redistest"
)

func TestLocalConformance(t *testing.T) {
	t.Parallel()
	runConformance(t, func(t *testing.T, cfg Config) Store {
		l, err := NewLocal(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}

func newRedisStore(t *testing.T, c redis.UniversalClient, cfg Config) *Redis {
	t.Helper()
	r, err := NewRedis(c, space(t, redistest.Prefix(t)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRedisConformance runs the suite on the shared Redis, each case with
// its own random account.
func TestRedisConformance(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	runConformance(t, func(t *testing.T, cfg Config) Store { return newRedisStore(t, c, cfg) })
}

// TestRedisClusterConformance runs it on a real 3-master Cluster: the
// transaction of Add would fail with CROSSSLOT if a step's keys were not
// in one slot, and the accounts land on different masters.
func TestRedisClusterConformance(t *testing.T) {
	t.Parallel()
	c := redistest.ClusterClient(t, redistest.StartCluster(t))
	runConformance(t, func(t *testing.T, cfg Config) Store { return newRedisStore(t, c, cfg) })
}

// TestRedisStepsExpire: every step hash carries the account's hash tag and
// an expiry just past the window, so the history's memory in Redis is
// bounded by the window whoever stops writing.
func TestRedisStepsExpire(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	account := redistest.Prefix(t)
	sp := space(t, account)
	r, err := NewRedis(c, sp, suiteConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add(t.Context(), base, Sample{Throttled: 1}); err != nil {
		t.Fatal(err)
	}
	keys, err := c.Keys(t.Context(), sp.Tag()+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || !strings.HasPrefix(keys[0], sp.Prefix("history")) {
		t.Fatalf("keys %q: want one step hash under the account's hash tag", keys)
	}
	ttl, err := c.PTTL(t.Context(), keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= time.Minute || ttl > time.Minute+10*time.Second {
		t.Fatalf("step TTL %s, want just over the 1m window (1m10s at most)", ttl)
	}
	// An Add of nothing writes nothing.
	if err := r.Add(t.Context(), base.Add(5*time.Second), Sample{}); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.Exists(t.Context(), r.k.step(r.cfg.stepOf(base.Add(5*time.Second)))).Result(); n != 0 {
		t.Fatal("an empty Add created a key")
	}
}

// TestRedisReadRefusesCorruptSteps: a field that is not a number is an
// error naming the key, not a silent zero.
func TestRedisReadRefusesCorruptSteps(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	r := newRedisStore(t, c, suiteConfig)
	key := r.k.step(r.cfg.stepOf(base))
	if err := c.HSet(t.Context(), key, "sent:otp", "x").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(t.Context(), key) })
	_, err := r.Read(t.Context(), base.Add(5*time.Second))
	if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "sent:otp") {
		t.Fatalf("Read of a corrupt step: %v", err)
	}
}

func TestConfigIsChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string // "" valid
	}{
		{Config{}, ""},
		{Config{Step: time.Second, Window: time.Minute}, ""},
		{Config{Step: 1500 * time.Microsecond}, "whole number of milliseconds"},
		{Config{Step: 7 * time.Second, Window: time.Minute}, "multiple of step"},
		{Config{Step: time.Second, Window: 2 * time.Hour}, "exceeds 1000 steps"},
		{Config{Step: time.Minute, Window: time.Second}, "multiple of step"},
	} {
		_, err := NewLocal(tc.cfg, nil)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("NewLocal(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := NewRedis(nil, space(t, "a"), Config{}); err == nil {
		t.Error("NewRedis without a client: no error")
	}
}

func space(t *testing.T, account string) keyspace.Space {
	t.Helper()
	sp, err := keyspace.New(account)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}
