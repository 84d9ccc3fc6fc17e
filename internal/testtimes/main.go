// Command testtimes runs `go test -json` and prints what a person reads of
// a test run: each package's result line as it ends, the whole output of
// every failed test and build, and at the end the skipped tests with their
// reasons and the slowest packages and tests, so that a slow or skipped
// test shows in every run. It exits with the go
// command's status (non-zero when any test or build failed).
//
//	go run ./internal/testtimes [-top 15] -- go test -json -race ./...
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

func main() {
	top := flag.Int("top", 15, "how many of the slowest packages and tests to list")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: testtimes [-top n] -- go test -json ...")
		os.Exit(2)
	}
	os.Exit(run(flag.Args(), *top))
}

func run(args []string, top int) int {
	start := time.Now()
	cmd := exec.Command(args[0], args[1:]...) //nolint:gosec,noctx // runs the command it is given, to its end
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtimes:", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testtimes:", err)
		return 2
	}
	r := newReport(os.Stdout)
	readErr := r.read(out)
	err = cmd.Wait()
	r.summary(top, time.Since(start))
	if readErr != nil {
		fmt.Fprintln(os.Stderr, "testtimes: reading the go command's output:", readErr)
		return 2
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode()
	case err != nil:
		fmt.Fprintln(os.Stderr, "testtimes:", err)
		return 2
	case r.failed > 0:
		return 1
	}
	return 0
}

// event is one line of `go test -json` (cmd/test2json), with the build
// events of the go command.
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string
}

type timing struct {
	name    string
	seconds float64
}

type report struct {
	w        io.Writer
	output   map[string][]string // by package and test: the lines so far
	build    map[string][]string // by import path: build output
	packages []timing
	tests    []timing
	skipped  []string // "pkg Test: reason"
	failed   int
}

// skipReason is what a skipped test said: its last line before "--- SKIP".
func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && !strings.HasPrefix(l, "--- SKIP") && !strings.HasPrefix(l, "=== ") {
			return l
		}
	}
	return "(no reason given)"
}

func newReport(w io.Writer) *report {
	return &report{w: w, output: map[string][]string{}, build: map[string][]string{}}
}

// read consumes the events until the stream ends. A line that is no event
// (the go command's own messages) is printed as it is.
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			_, _ = fmt.Fprintf(r.w, "%s\n", line)
			continue
		}
		r.handle(e)
	}
	return sc.Err()
}

func (r *report) handle(e event) {
	key := e.Package + " " + e.Test
	switch {
	case e.Action == "build-output":
		r.build[e.ImportPath] = append(r.build[e.ImportPath], e.Output)
	case e.Action == "build-fail":
		r.failed++
		_, _ = fmt.Fprint(r.w, strings.Join(r.build[e.ImportPath], ""))
		delete(r.build, e.ImportPath)
	case e.Action == "output":
		// A test's lines, or the package's own: its result ("ok  pkg
		// 1.2s") and what it printed outside a test (TestMain, a panic).
		r.output[key] = append(r.output[key], e.Output)
	case e.Test != "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		if e.Action == "fail" {
			_, _ = fmt.Fprint(r.w, strings.Join(r.output[key], ""))
		}
		if e.Action == "skip" && !strings.Contains(e.Test, "/") {
			r.skipped = append(r.skipped, e.Package+" "+e.Test+": "+skipReason(r.output[key]))
		}
		delete(r.output, key)
		if e.Action != "skip" && !strings.Contains(e.Test, "/") {
			r.tests = append(r.tests, timing{e.Package + " " + e.Test, e.Elapsed})
		}
	case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		lines := r.output[key]
		delete(r.output, key)
		switch e.Action {
		case "fail":
			r.failed++
			// Tests that never ended (a timeout, a panic elsewhere) first.
			var open []string
			for k := range r.output {
				if strings.HasPrefix(k, e.Package+" ") {
					open = append(open, k)
				}
			}
			slices.Sort(open)
			for _, k := range open {
				_, _ = fmt.Fprint(r.w, strings.Join(r.output[k], ""))
				delete(r.output, k)
			}
			_, _ = fmt.Fprint(r.w, strings.Join(lines, ""))
		case "pass":
			if n := len(lines); n > 0 {
				_, _ = fmt.Fprint(r.w, lines[n-1]) // "ok  pkg 1.2s"
			}
			r.packages = append(r.packages, timing{e.Package, e.Elapsed})
		}
	}
}

// summary prints the slowest packages and tests and the sum of the
// packages' times (what the run would take one package at a time).
func (r *report) summary(top int, wall time.Duration) {
	slowest := func(title string, ts []timing) {
		slices.SortStableFunc(ts, func(a, b timing) int { return cmp.Compare(b.seconds, a.seconds) })
		_, _ = fmt.Fprintf(r.w, "\n%s (of %d):\n", title, len(ts))
		for _, t := range ts[:min(top, len(ts))] {
			_, _ = fmt.Fprintf(r.w, "%8.1fs  %s\n", t.seconds, t.name)
		}
	}
	if len(r.skipped) > 0 {
		slices.Sort(r.skipped)
		_, _ = fmt.Fprintf(r.w, "\nskipped tests (%d):\n", len(r.skipped))
		for _, s := range r.skipped {
			_, _ = fmt.Fprintf(r.w, "  %s\n", s)
		}
	}
	slowest("slowest packages", r.packages)
	slowest("slowest tests", r.tests)
	var sum float64
	for _, p := range r.packages {
		sum += p.seconds
	}
	_, _ = fmt.Fprintf(r.w, "\npackages' test time %.0fs in all; wall clock %.0fs (builds included)\n", sum, wall.Seconds())
}
