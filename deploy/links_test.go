package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docFiles are the Markdown files we ship: the README, the design, the
// runbook and the other guides, and the chart's README.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../README.md", "helm/smsgw/README.md"}
	more, err := filepath.Glob("../docs/*.md")
	if err != nil || len(more) == 0 {
		t.Fatalf("docs/*.md: %v (%d files)", err, len(more))
	}
	return append(files, more...)
}

// mdLink is an inline Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// prose is a Markdown file's lines outside fenced code blocks.
func prose(b []byte) []string {
	var out []string
	fenced := false
	for l := range strings.Lines(string(b)) {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, l)
		}
	}
	return out
}

// headingAnchors is the set of anchors the headings of a Markdown file get.
func headingAnchors(b []byte) map[string]bool {
	anchors := map[string]bool{}
	for _, l := range prose(b) {
		if h, ok := strings.CutPrefix(strings.TrimRight(l, "\n"), "#"); ok {
			anchors[githubAnchor(strings.TrimLeft(h, "#"))] = true
		}
	}
	return anchors
}

// TestDocLinks: every relative link in the shipped Markdown names a file
// that exists and, with a #fragment, a heading of that file. A merge that
// drops a section, or a renamed heading, fails here instead of leaving a
// reader at a dead link.
func TestDocLinks(t *testing.T) {
	anchors := map[string]map[string]bool{} // by cleaned path
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := headingAnchors(readFile(t, path))
		anchors[path] = a
		return a
	}
	checked := 0
	for _, doc := range docFiles(t) {
		for i, l := range prose(readFile(t, doc)) {
			for _, m := range mdLink.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, frag, _ := strings.Cut(target, "#")
				path := filepath.Clean(doc)
				if file != "" {
					path = filepath.Join(filepath.Dir(doc), file)
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s (prose line %d): link %q: no such file", doc, i+1, target)
						continue
					}
				}
				checked++
				if frag == "" || !strings.HasSuffix(path, ".md") {
					continue
				}
				if !anchorsOf(path)[frag] {
					t.Errorf("%s (prose line %d): link %q: %s has no heading with anchor #%s", doc, i+1, target, path, frag)
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d relative links checked: is the link pattern still right?", checked)
	}
}
