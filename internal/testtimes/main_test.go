package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReport runs go test -json on a package with a passing, a failing and
// a skipped test and a package that does not build, and reads the report:
// the failures' whole output, the passing package's result line and no
// passing test's output, the skipped test with its reason, the slowest
// tests listed, and a failing status.
func TestReport(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test")
	}
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module probe\n\ngo 1.26\n")
	write("good/good_test.go", `package good
import "testing"
func TestQuiet(t *testing.T) { t.Log("passing-test-line") }
`)
	write("mixed/mixed_test.go", `package mixed
import "testing"
func TestPasses(t *testing.T) { t.Log("passing-test-line") }
func TestFails(t *testing.T) { t.Log("failing-test-line"); t.Fatal("wanted-failure") }
func TestSkips(t *testing.T) { t.Skip("no-tool-here") }
`)
	write("broken/broken_test.go", `package broken
import "testing"
func TestBroken(t *testing.T) { undefinedCall() }
`)
	var out strings.Builder
	r := newReport(&out)
	cmd := exec.CommandContext(t.Context(), "go", "test", "-count=1", "-json", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := r.read(stdout); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Error("go test passed; the probe packages must fail")
	}
	r.summary(5, 0)
	got := out.String()
	for _, want := range []string{"failing-test-line", "wanted-failure", "undefinedCall", "ok  \tprobe/good", "slowest tests (of 3)", "probe/mixed TestFails", "skipped tests (1):", "probe/mixed TestSkips: mixed_test.go:5: no-tool-here"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "passing-test-line") {
		t.Errorf("report shows a passing test's output:\n%s", got)
	}
	if r.failed != 3 { // the failing package, the build and its package
		t.Errorf("failed = %d, want 3:\n%s", r.failed, got)
	}
}
