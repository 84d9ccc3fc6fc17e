// Command mutate checks that the limiter's tests catch the bugs they are
// meant to catch. It reads the "mutation list" comment block of
// internal/limiter/limiter_test.go; for each mutant it writes the mutated
// file to a temporary directory, runs the named tests against it with
// `go test -overlay` (the working tree is never modified) and prints KILLED
// when they fail or SURVIVED when they pass. It exits non-zero when any
// mutant survived or could not be applied or built.
//
// Mutants run -j at a time (each its own build and test binary), their
// verdicts printed in the list's order; go vet is left to make vet (it
// would run again on every mutant's build), and the package is compiled
// without optimizations (half the compile time of every mutant).
//
//	go run ./internal/limiter/mutate [-pkg ./internal/limiter] [-only name] [-j 3]
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

type edit struct {
	file, old, new string
}

type mutant struct {
	name  string
	tests []string
	edits []edit
}

var (
	headerRE = regexp.MustCompile(`^//\t(\S+) \[([^\]]+)\]$`)
	editRE   = regexp.MustCompile("^//\t  (\\S+): `(.*)` -> `(.*)`$")
)

func main() {
	os.Exit(run())
}

func run() int {
	pkg := flag.String("pkg", "./internal/limiter", "package directory holding limiter_test.go")
	only := flag.String("only", "", "run only the mutant with this name")
	timeout := flag.Duration("timeout", 3*time.Minute, "time limit of one mutant's test run")
	verbose := flag.Bool("v", false, "show how each killed mutant failed")
	// Three at a time on two cores: a mutant's tests mostly wait (on Redis,
	// on a pause or a patience), and another's build fills that time.
	jobs := flag.Int("j", 3, "how many mutants to build and test at once")
	flag.Parse()

	dir, err := filepath.Abs(*pkg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		return 2
	}
	mutants, err := parse(filepath.Join(dir, "limiter_test.go"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		return 2
	}
	if *only != "" {
		mutants = slices.DeleteFunc(mutants, func(m mutant) bool { return m.name != *only })
	}
	if len(mutants) == 0 {
		fmt.Fprintln(os.Stderr, "mutate: no mutants found")
		return 2
	}
	tmp, err := os.MkdirTemp("", "smsgw-mutate-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		return 2
	}
	defer func() {
		if err := os.RemoveAll(tmp); err != nil {
			fmt.Fprintln(os.Stderr, "mutate: remove", tmp+":", err)
		}
	}()

	// The named tests must pass on the unmutated code, or a "kill" would
	// mean nothing.
	var all []string
	for _, m := range mutants {
		all = append(all, m.tests...)
	}
	if ok, out := goTest(dir, "", all, *timeout); !ok {
		fmt.Fprintf(os.Stderr, "mutate: the tests fail without any mutant:\n%s\n", out)
		return 2
	}

	failed := 0
	tryAll(dir, tmp, mutants, *timeout, max(1, *jobs), func(v verdict) {
		fmt.Print(v.report)
		if *verbose && v.killed {
			fmt.Println(v.detail)
		}
		if !v.killed {
			failed++
		}
	})
	fmt.Printf("%d mutants, %d killed, %d survived or invalid\n", len(mutants), len(mutants)-failed, failed)
	if failed > 0 {
		return 1
	}
	return 0
}

// verdict is one mutant's result: its report line(s), and how its tests
// failed when it was killed.
type verdict struct {
	killed         bool
	report, detail string
}

// tryAll tries every mutant, jobs at a time, and hands their verdicts to
// emit in the order of mutants, each as soon as it and every one before it
// are known.
func tryAll(dir, tmp string, mutants []mutant, timeout time.Duration, jobs int, emit func(verdict)) {
	out := make([]verdict, len(mutants))
	done := make([]chan struct{}, len(mutants))
	sem := make(chan struct{}, jobs)
	for i, m := range mutants {
		done[i] = make(chan struct{})
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i] = try(dir, filepath.Join(tmp, fmt.Sprint(i)), m, timeout)
			close(done[i])
		}()
	}
	for i := range done {
		<-done[i]
		emit(out[i])
	}
}

// try applies one mutant in an overlay under tmp, runs its tests and
// returns the verdict.
func try(dir, tmp string, m mutant, timeout time.Duration) verdict {
	overlay, err := apply(dir, tmp, m)
	if err != nil {
		return verdict{report: fmt.Sprintf("INVALID   %-34s %v\n", m.name, err)}
	}
	start := time.Now()
	ok, out := goTest(dir, overlay, m.tests, timeout)
	switch {
	case buildFailed(out):
		return verdict{report: fmt.Sprintf("INVALID   %-34s does not build:\n%s\n", m.name, indent(out))}
	case ok:
		return verdict{report: fmt.Sprintf("SURVIVED  %-34s %s passed (%s)\n", m.name, strings.Join(m.tests, ","), time.Since(start).Round(time.Second))}
	}
	return verdict{killed: true, detail: indent(failures(out)),
		report: fmt.Sprintf("KILLED    %-34s by %s (%s)\n", m.name, strings.Join(m.tests, ","), time.Since(start).Round(time.Second))}
}

// parse reads the mutation list: a "// mutation list" comment, then mutant
// headers "//\tname [Test1 Test2]", each followed by its edits
// "//\t  file: `old` -> `new`", until the comment ends.
func parse(path string) ([]mutant, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // opened read-only: nothing to lose
	var out []mutant
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !in {
			in = strings.HasPrefix(line, "// mutation list")
			continue
		}
		if !strings.HasPrefix(line, "//") {
			break
		}
		if m := headerRE.FindStringSubmatch(line); m != nil {
			out = append(out, mutant{name: m[1], tests: strings.FieldsFunc(m[2], func(r rune) bool { return r == ' ' || r == ',' })})
			continue
		}
		if m := editRE.FindStringSubmatch(line); m != nil {
			if len(out) == 0 {
				return nil, fmt.Errorf("%s: edit before any mutant: %s", path, line)
			}
			last := &out[len(out)-1]
			last.edits = append(last.edits, edit{file: m[1], old: m[2], new: m[3]})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, m := range out {
		if len(m.edits) == 0 {
			return nil, fmt.Errorf("mutant %s has no edit", m.name)
		}
	}
	return out, nil
}

// apply writes the mutated files under dir and returns the overlay file.
func apply(pkgDir, dir string, m mutant) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	mutated := map[string][]byte{}
	for _, e := range m.edits {
		src := filepath.Join(pkgDir, e.file)
		b, ok := mutated[src]
		if !ok {
			var err error
			if b, err = os.ReadFile(src); err != nil {
				return "", err
			}
		}
		if n := bytes.Count(b, []byte(e.old)); n != 1 {
			return "", fmt.Errorf("%s: %q occurs %d times, want exactly once", e.file, e.old, n)
		}
		mutated[src] = bytes.Replace(b, []byte(e.old), []byte(e.new), 1)
	}
	replace := map[string]string{}
	for src, b := range mutated {
		dst := filepath.Join(dir, filepath.Base(src))
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return "", err
		}
		replace[src] = dst
	}
	js, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return "", err
	}
	overlay := filepath.Join(dir, "overlay.json")
	return overlay, os.WriteFile(overlay, js, 0o644)
}

// goTest runs the named tests of the package in pkgDir, through overlay
// when it is not empty. The package (the file every mutant but a few
// changes) is compiled without optimizations or inlining (-N -l): each
// mutant recompiles it with its tests, and that takes half the CPU time;
// the code means the same.
func goTest(pkgDir, overlay string, tests []string, timeout time.Duration) (bool, string) {
	args := []string{"test", "-count=1", "-vet=off", "-gcflags=.=-N -l", "-timeout", timeout.String(), "-run", "^(" + strings.Join(tests, "|") + ")$"}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	args = append(args, ".")
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = pkgDir
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return false, fmt.Sprintf("go test: %v\n%s", err, out)
	}
	return err == nil, string(out)
}

func buildFailed(out string) bool {
	return strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]") ||
		strings.Contains(out, "go test: ")
}

// failures keeps the failure lines of go test output.
func failures(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "--- FAIL") || strings.Contains(t, "_test.go:") {
			keep = append(keep, t)
		}
	}
	if len(keep) > 8 {
		keep = keep[:8]
	}
	return strings.Join(keep, "\n")
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n    ")
}
