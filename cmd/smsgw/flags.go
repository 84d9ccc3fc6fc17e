package main

import (
	"errors"
	"flag"
	"io"
	"os"

	"smsgw/internal/config"
)

// newFlagSet is the flag set of the subcommand c: errors and usage go to
// stderr, and the usage names the command and what it does.
func newFlagSet(c command, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		complain(stderr, "usage: smsgw %s [flags]\n\n%s\n\n", c.name, c.usage)
		complain(stderr, "flags:\n")
		fs.PrintDefaults()
	}
	return fs
}

// configFlag defines --config, the configuration file, defaulting to
// SMSGW_CONFIG; usage says what the command does with it.
func configFlag(fs *flag.FlagSet, usage string) *string {
	return fs.String("config", os.Getenv("SMSGW_CONFIG"), usage)
}

// parseArgs parses a subcommand's arguments. It returns ok false with the
// exit code when the command must not run: 0 after -h or --help (the
// usage is printed), 2 for a bad flag or any positional argument (none of
// the commands takes one).
func parseArgs(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false // the flag package printed the error and the usage
	}
	if fs.NArg() > 0 {
		complain(stderr, "smsgw %s: unexpected argument %q (flags go before it; run 'smsgw %s -h')\n", fs.Name(), fs.Arg(0), fs.Name())
		return 2, false
	}
	return 0, true
}

// loadRequiredConfig loads the configuration file at path for the command
// cmd, which cannot run without one; required names the flags that would
// have given it. A non-zero code is the exit code, the problem already
// written to stderr: 2 for no path, 1 for a file that does not load.
func loadRequiredConfig(stderr io.Writer, cmd, path, required string) (cfg config.Config, code int) {
	if path == "" {
		complain(stderr, "smsgw %s: %s is required\n", cmd, required)
		return config.Config{}, 2
	}
	cfg, err := config.LoadFile(path)
	if err != nil {
		complain(stderr, "%s: %v\n", path, err)
		return config.Config{}, 1
	}
	return cfg, 0
}
