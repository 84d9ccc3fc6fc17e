package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

func checkConfigCommand(fs *flag.FlagSet) runner {
	path := configFlag(fs, "configuration file (YAML)")
	return func(_ context.Context, stdout, stderr io.Writer) int {
		cfg, code := loadRequiredConfig(stderr, "check-config", *path, "--config")
		if code != 0 {
			return code
		}
		mode := "embedded store at " + cfg.Store.Path + ", local limiter (exactly one replica)"
		if cfg.Redis.Enabled() {
			mode = fmt.Sprintf("Redis at %s, shared limiter (fallback %.2f/s per process)", cfg.Redis.Addr, cfg.Limits.TargetRPS/float64(cfg.Limits.MaxSenders))
		}
		senders := "every producer names its senders"
		if open := cfg.OpenSenders(); len(open) > 0 {
			senders = "any sender id for " + strings.Join(open, ", ") + " (no producers[].senders: set them)"
		}
		if _, err := fmt.Fprintf(stdout, "%s: ok\n  provider: %s, contract %g/s, target %g/s, burst %d\n  mode: %s\n  segments: %s\n  producers: %d\n  senders: %s\n  protection: %s\n  rotation: %s\n",
			*path, cfg.Provider.Kind, cfg.Provider.ContractRPS, cfg.Limits.TargetRPS, cfg.Limits.Burst, mode, cfg.SegmentsSummary(), len(cfg.Producers),
			senders, cfg.Protection.Summary(), cfg.RotationSummary()); err != nil {
			complain(stderr, "smsgw check-config: write: %v\n", err)
			return 1
		}
		return 0
	}
}
