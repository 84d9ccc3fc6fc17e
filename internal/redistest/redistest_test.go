package redistest

import (
	"context"
	"sync"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestServerRestartKeepsAOFData(t *testing.T) {
	s := StartServer(t, ServerOptions{AppendOnly: true})
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer func() { _ = c.Close() }()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("ping after kill succeeded")
	}
	s.Start()
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after restart: %q, %v", v, err)
	}
}

// A server started with Nice runs at that priority (a positive value
// needs no privilege).
func TestServerNice(t *testing.T) {
	s := StartServer(t, ServerOptions{Nice: 7})
	s.mu.Lock()
	pid := s.cmd.Process.Pid
	s.mu.Unlock()
	got, err := syscall.Getpriority(syscall.PRIO_PROCESS, pid)
	if err != nil {
		t.Fatal(err)
	}
	// The raw system call answers 20 - nice (see getpriority(2)).
	if nice := 20 - got; nice != 7 {
		t.Fatalf("redis-server runs at nice %d, want 7", nice)
	}
}

func TestClusterSpreadsSlots(t *testing.T) {
	addrs := StartCluster(t)
	c := ClusterClient(t, addrs)
	ctx := context.Background()
	var mu sync.Mutex // ForEachMaster calls back concurrently
	masters := map[string]bool{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		if err := c.Set(ctx, k, 1, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		if err == nil && n > 0 {
			mu.Lock()
			masters[m.Options().Addr] = true
			mu.Unlock()
		}
		return nil
	})
	if len(masters) < 2 {
		t.Fatalf("keys landed on %d masters, want a real cluster", len(masters))
	}
	// A multi-key command across slots must fail on a real cluster.
	if err := c.Do(ctx, "MSET", "a", 1, "b", 2).Err(); err == nil {
		t.Fatal("cross-slot MSET succeeded; not a cluster")
	}
}
