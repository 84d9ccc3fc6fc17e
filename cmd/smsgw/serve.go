package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"

	"smsgw/internal/config"
	"smsgw/internal/dashboard"
	"smsgw/internal/gateway"
)

func init() {
	register(command{name: "serve", usage: "run the gateway (--config smsgw.yaml; SMSGW_* variables override keys)", run: runServe})
}

// runServe loads the configuration, runs the gateway until ctx ends
// (SIGINT/SIGTERM) and stops it gracefully.
func runServe(ctx context.Context, args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", os.Getenv("SMSGW_CONFIG"), "configuration file (YAML); empty: defaults and SMSGW_* variables only")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		complain(stderr, "smsgw serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg, err := config.LoadFile(*path)
	if err != nil {
		complain(stderr, "smsgw serve: %v\n", err)
		return 1
	}
	log := newLogger(stderr, cfg.Log)
	if err := gateway.Run(ctx, cfg, gateway.Options{Logger: log, Dashboard: dashboard.Handler()}); err != nil {
		log.Error("gateway failed", "err", err)
		return 1
	}
	return 0
}

// newLogger builds the process logger from log.level and log.format
// (both validated by the configuration).
func newLogger(w io.Writer, lc config.LogConfig) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(lc.Level))
	opts := &slog.HandlerOptions{Level: level}
	if lc.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
