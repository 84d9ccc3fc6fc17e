package main

import (
	"io"
	"log/slog"
)

// handlerOptions are the options of every handler a command builds: level,
// and durations written as Go durations ("30s") rather than the
// nanoseconds the JSON handler writes by default.
func handlerOptions(level slog.Leveler) *slog.HandlerOptions {
	return &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsText}
}

// durationsAsText is a slog ReplaceAttr writing a time.Duration as its
// String ("30s", "1.5ms"). Other values, masked numbers included, pass
// unchanged.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// newTextLogger is the text logger of the commands other than serve.
func newTextLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, handlerOptions(level)))
}
