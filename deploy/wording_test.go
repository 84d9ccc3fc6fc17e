package deploy_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// diaryWords is how a text speaks of the work that made the product
// instead of the product: a numbered stop, issue, helper, session or
// finding; a figure said to be re-run at some commit's hash; "this",
// "last" or "next" before the word stop or session; a review called the
// last one; a day, week or month before now. Code, comments, tests, docs
// and the chart name the behaviour instead.
var diaryWords = regexp.MustCompile(`(?i)\b(?:(?:stop|issue|helper|session|finding)s? #?[0-9]+\b|re-?run at [0-9a-f]{7,40}\b|(?:this|last|previous|next) (?:stop|session)\b|the last\s+review\b|an? (?:week|day|month) ago\b)`)

// TestNoDiaryWords: no tracked file speaks of how the product was made.
func TestNoDiaryWords(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not found: the tracked files cannot be listed")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), "git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): the tracked files cannot be listed", err)
	}
	checked := 0
	for name := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree, not yet committed
			}
			t.Fatal(err)
		}
		if bytes.IndexByte(b, 0) >= 0 {
			continue // binary
		}
		checked++
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range diaryWords.FindAllString(line, -1) {
				t.Errorf("%s:%d: %q speaks of how the product was made; name the behaviour instead", name, i+1, m)
			}
		}
	}
	if checked < 100 {
		t.Errorf("only %d tracked text files checked: is the listing still right?", checked)
	}
}
