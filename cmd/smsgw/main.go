// Command smsgw is the SMS gateway: one binary for the gateway (serve), the
// provider simulator (sim), the demo, the benchmark and config checks.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// command is one subcommand. flags declares its flags on fs and returns
// what runs once they are parsed; the parsing (-h, a bad flag, a stray
// argument) is the same for every command and done in exec.
type command struct {
	name, usage string
	flags       func(fs *flag.FlagSet) runner
}

// runner is a command with its flags parsed; it returns the process exit
// code.
type runner func(ctx context.Context, stdout, stderr io.Writer) int

// commands are the subcommands, in the order the usage lists them.
var commands = []command{
	{name: "bench", usage: "what the provider sees under the old limiters and ours (--pods 16 --duration 5s --window both)", flags: benchCommand},
	{name: "check-config", usage: "validate a configuration file (and SMSGW_* overrides) and exit", flags: checkConfigCommand},
	{name: "compact-store", usage: "give back the disk an embedded store's file kept after a backlog (gateway stopped)", flags: compactStoreCommand},
	{name: "demo", usage: "gateway + provider simulator + a campaign and an OTP trickle, dashboard on :8080", flags: demoCommand},
	{name: "serve", usage: "run the gateway (--config smsgw.yaml; SMSGW_* variables override keys)", flags: serveCommand},
	{name: "sim", usage: "run the provider simulator (--limit 100 --window sliding|fixed --offset 0.37)", flags: simCommand},
}

// exec parses args (those after the command's name) and runs the command.
func (c command) exec(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet(c, stderr)
	r := c.flags(fs)
	if code, ok := parseArgs(fs, args, stderr); !ok {
		return code
	}
	return r(ctx, stdout, stderr)
}

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
			return c.exec(ctx, args[1:], stdout, stderr)
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
