package tests

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/redistest"
)

// TestStoredBytesThroughGateway: what Redis keeps per message of ordinary
// traffic sent through a gateway (each message with a short reference and,
// in the keyed run, an Idempotency-Key), by kind of key (MEMORY USAGE of
// every key, grouped by the part of its name after the account's tag), once
// everything was sent. Opt-in with the fleet runs (-fleet or
// SMSGW_FLEET=1); it logs figures and asserts nothing but that every
// message was sent.
func TestStoredBytesThroughGateway(t *testing.T) {
	fleetOnly(t)
	for _, keyed := range []bool{false, true} {
		t.Run(fmt.Sprintf("keyed=%v", keyed), func(t *testing.T) { storedThroughGateway(t, keyed) })
	}
}

func storedThroughGateway(t *testing.T, keyed bool) {
	const n = 2000
	rs := redistest.StartServer(t, redistest.ServerOptions{})
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { _ = c.Close() })
	sim := startSim(t, "--limit", "100", "--window", "sliding")
	gw := startGateway(t, "gw", gwOptions{RedisAddr: rs.Addr, Account: "size", SimURL: sim.URL})
	ctx := context.Background()
	base := usedMemoryOf(t, c)
	for i := range n {
		body := map[string]string{"to": phone(i), "body": "Your order has shipped and will arrive tomorrow between 9:00 and 12:00.", "class": "transactional",
			"reference": fmt.Sprintf("order-%06d", i)}
		var hdr []string
		if keyed {
			hdr = []string{"Idempotency-Key", fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)}
		}
		if r := post(t, gw.URL+"/v1/messages", keyTxn, body, hdr...); r.Status != http.StatusAccepted {
			t.Fatalf("post %d: %d %s", i, r.Status, r.Body)
		}
	}
	sim.WaitAccepted(t, n, 120*time.Second)
	used := usedMemoryOf(t, c) - base
	byKind := map[string]int64{}
	count := map[string]int{}
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		m, err := c.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		kind := k
		if i := strings.Index(k, "}"); i >= 0 {
			kind = k[i+1:]
		}
		kind = strings.TrimLeft(kind, ":")
		if i := strings.IndexAny(kind, "0123456789"); i > 0 {
			kind = kind[:i]
		}
		if len(kind) > 24 {
			kind = kind[:24]
		}
		byKind[kind] += m
		count[kind]++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return byKind[kinds[i]] > byKind[kinds[j]] })
	var b strings.Builder
	for _, k := range kinds {
		fmt.Fprintf(&b, "\n  %-26s %6d keys %8.1f B/msg", k, count[k], float64(byKind[k])/n)
	}
	t.Logf("%d messages sent (keyed %v): used_memory grew %.1f B/msg; MEMORY USAGE by kind:%s", n, keyed, float64(used)/n, b.String())
}

func usedMemoryOf(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			var n int64
			_, _ = fmt.Sscan(v, &n)
			return n
		}
	}
	t.Fatal("no used_memory")
	return 0
}
