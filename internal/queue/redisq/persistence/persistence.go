// Package persistence checks that Redis keeps what the queue writes: an
// append-only file on the server, or on every master of a cluster.
package persistence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Check reports whether Redis (c; on a cluster every master) writes an
// append-only file, so that queued messages survive a Redis restart. It
// logs a loud warning on log when they do not. Where CONFIG is disabled
// (managed Redis) it reads INFO persistence.
func Check(ctx context.Context, c redis.UniversalClient, log *slog.Logger) (appendOnly bool, err error) {
	type node struct {
		addr     string
		aof      bool
		fsync    string
		checkErr error
	}
	var (
		mu    sync.Mutex
		nodes []node
	)
	check := func(ctx context.Context, rc redis.UniversalClient, addr string) error {
		aof, fsync, err := nodePersistence(ctx, rc)
		mu.Lock()
		nodes = append(nodes, node{addr: addr, aof: aof, fsync: fsync, checkErr: err})
		mu.Unlock()
		return err
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return check(ctx, c, c.Options().Addr)
		})
	} else {
		err = check(ctx, c, "")
	}
	if err != nil {
		return false, fmt.Errorf("check persistence: %w", err)
	}
	appendOnly = len(nodes) > 0
	for _, n := range nodes {
		if !n.aof {
			appendOnly = false
			log.Warn("REDIS DOES NOT PERSIST THE QUEUE: appendonly is off, so every queued message is lost when Redis restarts; set appendonly yes (appendfsync always or everysec)",
				"node", n.addr)
			continue
		}
		if n.fsync == "no" {
			log.Warn("redis appendfsync is no: the last seconds of queued messages may be lost on a crash; prefer always or everysec",
				"node", n.addr)
		}
	}
	if appendOnly {
		log.Info("redis persists the queue (appendonly yes)", "nodes", len(nodes))
	}
	return appendOnly, nil
}

// nodePersistence reads one node's appendonly (and appendfsync when CONFIG
// answers; "" otherwise).
func nodePersistence(ctx context.Context, c redis.UniversalClient) (aof bool, fsync string, err error) {
	cfg, cfgErr := c.ConfigGet(ctx, "append*").Result()
	if cfgErr == nil {
		if v, ok := cfg["appendonly"]; ok {
			return v == "yes", cfg["appendfsync"], nil
		}
	}
	if ctx.Err() != nil {
		return false, "", ctx.Err()
	}
	info, err := c.Info(ctx, "persistence").Result()
	if err != nil {
		return false, "", errors.Join(cfgErr, err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "aof_enabled:"); ok {
			return v == "1", "", nil
		}
	}
	return false, "", errors.Join(cfgErr, errors.New("INFO persistence has no aof_enabled"))
}
