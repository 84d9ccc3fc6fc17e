package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// -h and --help of every command print its usage and flags and exit 0,
// without running it; like smsgw --help.
func TestCommandHelpExitsZero(t *testing.T) {
	t.Parallel()
	if len(commands) < 5 {
		t.Fatalf("only %d commands registered", len(commands))
	}
	for _, c := range commands {
		for _, h := range []string{"-h", "--help", "-help"} {
			var out, errb bytes.Buffer
			if code := run([]string{c.name, h}, &out, &errb); code != 0 {
				t.Errorf("smsgw %s %s: exit %d, want 0 (%s)", c.name, h, code, errb.String())
			}
			for _, want := range []string{"usage: smsgw " + c.name + " [flags]", c.usage, "flags:", "  -"} {
				if !strings.Contains(errb.String(), want) {
					t.Errorf("smsgw %s %s: usage lacks %q:\n%s", c.name, h, want, errb.String())
				}
			}
			if out.Len() > 0 {
				t.Errorf("smsgw %s %s ran: %s", c.name, h, out.String())
			}
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"--help"}, &out, &errb); code != 0 {
		t.Errorf("smsgw --help: exit %d", code)
	}
}

// No command takes a positional argument: each refuses one with exit 2,
// naming it, before it does anything (check-config used to ignore it).
func TestCommandsRefuseArguments(t *testing.T) {
	t.Parallel()
	good := "../../internal/config/testdata/good/full.yaml"
	for _, c := range commands {
		var out, errb bytes.Buffer
		args := []string{c.name, "--config", good, "extra"}
		if c.name != "check-config" && c.name != "serve" {
			args = []string{c.name, "extra"}
		}
		if code := run(args, &out, &errb); code != 2 || !strings.Contains(errb.String(), `smsgw `+c.name+`: unexpected argument "extra"`) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming the argument", args, code, errb.String())
		}
		if out.Len() > 0 {
			t.Errorf("%v ran: %s", args, out.String())
		}
	}
	// A bad flag stays exit 2.
	var out, errb bytes.Buffer
	if code := run([]string{"check-config", "--no-such-flag"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "no-such-flag") {
		t.Errorf("bad flag: exit %d, stderr %q", code, errb.String())
	}
}

// runCommand runs the command name as smsgw would, with ctx for the signal
// context.
func runCommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	for _, c := range commands {
		if c.name == name {
			return c.exec(ctx, args, stdout, stderr)
		}
	}
	panic("no command " + name)
}
