// Command smsgw is the SMS gateway: one binary for the gateway (serve), the
// provider simulator (sim), the demo, the benchmark and config checks.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// command is one subcommand. run gets the arguments after the subcommand's
// name and returns the process exit code.
type command struct {
	name, usage string
	run         func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var commands []command

func register(c command) { commands = append(commands, c) }

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	complain(stderr, "smsgw: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	complain(w, "usage: smsgw <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		complain(w, "  %-13s %s\n", c.name, c.usage)
	}
	complain(w, "\nRun 'smsgw <command> -h' for the flags of a command.\n")
}

// complain writes a diagnostic (usage, a bad flag, a failure) to stderr. A
// failed write to stderr has nowhere left to be reported, so its error is
// dropped here, in this one place.
func complain(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(w, format, args...)
}
