package main

import (
	"errors"
	"flag"
	"io"
)

// newFlagSet is the flag set of the subcommand name: errors and usage go
// to stderr, and the usage names the command and what it does.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		complain(stderr, "usage: smsgw %s [flags]\n\n", name)
		for _, c := range commands {
			if c.name == name {
				complain(stderr, "%s\n\n", c.usage)
			}
		}
		complain(stderr, "flags:\n")
		fs.PrintDefaults()
	}
	return fs
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
