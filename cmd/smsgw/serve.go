package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"smsgw/internal/config"
	"smsgw/internal/dashboard"
	"smsgw/internal/gateway"
)

// serveCommand loads the configuration, runs the gateway until ctx ends
// (SIGINT/SIGTERM) and stops it gracefully.
func serveCommand(fs *flag.FlagSet) runner {
	path := configFlag(fs, "configuration file (YAML); empty: defaults and SMSGW_* variables only")
	return func(ctx context.Context, _, stderr io.Writer) int {
		cfg, err := config.LoadFile(*path)
		if err != nil {
			complain(stderr, "smsgw serve: %v\n", err)
			return 1
		}
		log := newLogger(stderr, cfg.Log)
		gateway.SetRedisLogger(log) // the Redis client's own lines as sampled JSON records, not plain text
		return stopped(log, gateway.Run(ctx, cfg, gateway.Options{Logger: log, Dashboard: dashboard.Handler()}))
	}
}

// stopped logs how the gateway ended and returns the exit code. Sends cut
// short by a stop that ran out of time (dispatch.ErrSendsCutShort) are the
// documented end of a graceful stop, not a failure: their messages were
// put back without spending an attempt (docs/operations.md section 7).
// That alone is one WARN and exit 0; any other error is ERROR and exit 1.
func stopped(log *slog.Logger, err error) int {
	if err == nil {
		return 0
	}
	if n, ok := onlyCutShort(err); ok {
		what := fmt.Sprintf("%d sends cut short were", n)
		if n == 1 {
			what = "1 send cut short was"
		}
		log.Warn("stopped; "+what+" put back", "sends", n, "detail", err.Error())
		return 0
	}
	log.Error("gateway failed", "err", err)
	return 1
}

// onlyCutShort reports whether every error in err's tree is sends cut
// short by the stop (a *dispatch.CutShortError, joined or wrapped with
// context), and how many sends they cut short in all. It knows that error
// by its SendsCutShort method: this package may not import
// internal/dispatch (internal/layering).
func onlyCutShort(err error) (int, bool) {
	switch e := err.(type) {
	case interface{ SendsCutShort() int }:
		return e.SendsCutShort(), true
	case interface{ Unwrap() []error }:
		total, found := 0, false
		for _, inner := range e.Unwrap() {
			if inner == nil {
				continue
			}
			n, ok := onlyCutShort(inner)
			if !ok {
				return 0, false
			}
			total, found = total+n, true
		}
		return total, found
	case interface{ Unwrap() error }:
		if inner := e.Unwrap(); inner != nil {
			return onlyCutShort(inner)
		}
	}
	return 0, false
}

// newLogger builds the process logger from log.level and log.format
// (both validated by the configuration).
func newLogger(w io.Writer, lc config.LogConfig) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(lc.Level))
	opts := handlerOptions(level)
	if lc.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
