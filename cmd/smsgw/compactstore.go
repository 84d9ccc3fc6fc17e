package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"smsgw/internal/gateway"
)

// compactStoreCommand rewrites the embedded store's file without its free
// pages (embedded.CompactFile). The store is named by --path, or by the
// store.path of --config; a configuration on Redis has no file to compact.
func compactStoreCommand(fs *flag.FlagSet) runner {
	cfgPath := configFlag(fs, "configuration file (YAML): its store.path is compacted")
	dir := fs.String("path", "", "the store directory (store.path); overrides --config")
	wait := fs.Duration("lock-timeout", time.Second, "how long to wait for the store's lock (a running gateway holds it)")
	return func(_ context.Context, stdout, stderr io.Writer) int {
		if *dir == "" {
			cfg, code := loadRequiredConfig(stderr, "compact-store", *cfgPath, "--path or --config")
			if code != 0 {
				return code
			}
			if cfg.Redis.Enabled() {
				complain(stderr, "smsgw compact-store: %s keeps the queue in Redis (redis.addr is set); there is no store file to compact\n", *cfgPath)
				return 2
			}
			*dir = cfg.Store.Path
		}
		res, err := gateway.CompactStore(*dir, *wait)
		if err != nil {
			complain(stderr, "smsgw compact-store: %v\n", err)
			return 1
		}
		if _, err := fmt.Fprintf(stdout, "%s: %s → %s (%d keys copied)\n", res.File, mib(res.Before), mib(res.After), res.Keys); err != nil {
			complain(stderr, "smsgw compact-store: write: %v\n", err)
			return 1
		}
		return 0
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
