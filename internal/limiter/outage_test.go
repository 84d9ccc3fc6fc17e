package limiter

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/redistest"
)

// TestOutageSharedByTheReplicasRedisUsers: one process meets a Redis that
// stopped answering once, not once per limiter. The send limiter's failed
// call tells the process's Outage; the ingress limiter and a second send
// limiter, whose breakers are still closed, then open them without a
// Redis call of their own and decide locally at once (an OTP's reservation
// and its producer's quota). Once Redis answers, each finds it back with
// its own probe, and joining never kept a breaker open: with no recent
// failure the ingress limiter asks Redis again.
func TestOutageSharedByTheReplicasRedisUsers(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	calls := &scriptCalls{}
	c := redis.NewClient(productionOptions(srv.Addr))
	c.AddHook(calls)
	t.Cleanup(func() { _ = c.Close() })
	account := redistest.Prefix(t)
	cfg := Config{Global: Rate{PerSecond: 100, Burst: 4}}
	o := &Outage{}
	newSend := func() *Shared {
		r, err := NewRedis(c, account, cfg)
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewShared(SharedConfig{Redis: r, MaxSenders: 2, Outage: o, RedisTimeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	first, second := newSend(), newSend()
	rk, err := NewRedisKeys(c, account)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := NewSharedKeys(SharedKeysConfig{Redis: rk, Outage: o, RedisTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if o.Recent() {
		t.Fatal("a new Outage reports a recent failure")
	}
	if d, err := second.Reserve(bg, Request{Cost: 1, Hasty: true}); err != nil || d.Mode != ModeShared {
		t.Fatalf("hasty reservation with Redis up and no failure: %+v %v", d, err)
	}
	srv.Freeze()
	t.Cleanup(srv.Thaw)
	if d, err := first.Reserve(bg, Request{Cost: 1, MaxWait: time.Second}); err != nil || d.Mode != ModeFallback {
		t.Fatalf("first reservation with Redis frozen: %+v %v", d, err)
	}
	if !o.Recent() {
		t.Fatal("the send limiter's breaker opened and the process's Outage was not told")
	}
	calls.n.Store(0)
	if d, err := keys.Allow(bg, "p", Rate{PerSecond: 10, Burst: 2}, 1); err != nil || !d.Allowed {
		t.Fatalf("ingress after the send limiter failed: %+v %v", d, err)
	}
	if d, err := second.Reserve(bg, Request{Cost: 1, MaxWait: time.Second, Hasty: true}); err != nil || !d.Allowed || d.Mode != ModeFallback {
		t.Fatalf("hasty reservation after another limiter failed: %+v %v", d, err)
	}
	if n := calls.n.Load(); n != 0 {
		t.Fatalf("%d Redis calls after the process found Redis gone; want none", n)
	}
	if second.Mode() != ModeFallback || keys.Mode() != ModeFallback {
		t.Fatalf("modes %s and %s after another limiter's failure; want both joined (fallback)", second.Mode(), keys.Mode())
	}
	srv.Thaw()
	// A caller that may wait decides on Redis again once the breaker lets
	// it probe.
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		d, err := second.Reserve(bg, Request{Cost: 1, MaxWait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if d.Mode == ModeShared {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the second limiter still in fallback 5 s after Redis came back")
		}
	}
	for end := time.Now().Add(5 * time.Second); keys.Mode() != ModeShared; time.Sleep(10 * time.Millisecond) {
		if _, err := keys.Allow(bg, "p", Rate{PerSecond: 10, Burst: 2}, 1); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(end) {
			t.Fatal("the ingress limiter still in fallback 5 s after Redis came back")
		}
	}
	if o.Recent() {
		t.Fatal("the Outage reports a recent failure with every breaker closed again")
	}
}
