package limiter

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"smsgw/internal/redistest"
)

// The Redis benchmarks run side by side on the same Redis and client, with
// the same parallelism: decisions/s of the limiter against a plain SET.
// Compare their ns/op (ratio = SET ns/op ÷ Reserve ns/op).

// benchCfg never denies, so every op is one full decision that writes.
var benchCfg = Config{Global: Rate{PerSecond: maxPerSecond, Burst: 1_000_000}, Classes: map[string]Rate{"marketing": {PerSecond: maxPerSecond, Burst: 1_000_000}}}

// BenchmarkRedisReserve is a capped class (marketing): three keys.
func BenchmarkRedisReserve(b *testing.B) { benchmarkRedisReserve(b, "marketing") }

// BenchmarkRedisReserveOTP is an uncapped class (OTP, transactional): the
// pause and global keys only.
func BenchmarkRedisReserveOTP(b *testing.B) { benchmarkRedisReserve(b, "otp") }

func benchmarkRedisReserve(b *testing.B, class string) {
	client := redistest.Client(b)
	r, err := NewRedis(client, redistest.Prefix(b), benchCfg)
	if err != nil {
		b.Fatal(err)
	}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := r.Reserve(bg, Request{Class: class, Cost: 1}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkRedisSET(b *testing.B) {
	client := redistest.Client(b)
	ks, err := newKeySet(redistest.Prefix(b))
	if err != nil {
		b.Fatal(err)
	}
	key := ks.tag + ":bench"
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := client.Set(bg, key, strconv.FormatInt(n.Add(1), 10), time.Minute).Err(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkLocalReserve(b *testing.B) {
	l, err := NewLocal(benchCfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if _, err := l.Reserve(bg, Request{Class: "marketing", Cost: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := l.Reserve(bg, Request{Class: "marketing", Cost: 1}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
