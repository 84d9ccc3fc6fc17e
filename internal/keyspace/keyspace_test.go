package keyspace

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateAccount(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"main", "payments", "eu-1", "acct_2", "v1.2", "1e3", "A", strings.Repeat("a", MaxAccountLen)} {
		if err := ValidateAccount(ok); err != nil {
			t.Errorf("ValidateAccount(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "a{b", "{a}", "a}", "a:b", "a b", "a\tb", "a\nb", "a*", "a?", "a[b]", "ä", "a/b",
		strings.Repeat("a", MaxAccountLen+1)} {
		err := ValidateAccount(bad)
		if !errors.Is(err, ErrInvalidAccount) {
			t.Errorf("ValidateAccount(%q) = %v, want ErrInvalidAccount", bad, err)
		}
		if _, err := New(bad); !errors.Is(err, ErrInvalidAccount) {
			t.Errorf("New(%q) = %v, want ErrInvalidAccount", bad, err)
		}
	}
}

func TestSpaceKeys(t *testing.T) {
	t.Parallel()
	s, err := New("main")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ got, want string }{
		{s.Account(), "main"},
		{s.Tag(), "{smsgw:main}"},
		{s.Key(), "{smsgw:main}"},
		{s.Key("limiter", "pause"), "{smsgw:main}:limiter:pause"},
		{s.Prefix("q"), "{smsgw:main}:q:"},
		{s.Prefix("api"), "{smsgw:main}:api:"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// hashTag is what Redis Cluster hashes: the text between the first '{' and
// the first '}' after it, when not empty; else the whole key.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// FuzzAccountTag: for every account ValidateAccount accepts, every key of
// its space hashes on exactly "smsgw:<account>", whatever follows the tag.
func FuzzAccountTag(f *testing.F) {
	for _, s := range []string{"main", "a}b", "{x}", "a:b", "", "eu-1.x_2"} {
		f.Add(s, "ready}:{otp")
	}
	f.Fuzz(func(t *testing.T, account, suffix string) {
		s, err := New(account)
		if err != nil {
			return
		}
		key := s.Key("q", suffix)
		if got := hashTag(key); got != "smsgw:"+account {
			t.Fatalf("key %q hashes on %q, want smsgw:%s", key, got, account)
		}
	})
}

// TestTagLiteralInOnePlace: the hash tag's text is written in one string
// literal of the module's non-test code, this package's; every other
// package builds its keys from a Space.
func TestTagLiteralInOnePlace(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && strings.Contains(lit.Value, "{smsgw:") {
				found = append(found, filepath.ToSlash(path))
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || !strings.HasSuffix(found[0], "internal/keyspace/keyspace.go") {
		t.Errorf("the tag literal is in %v, want only internal/keyspace/keyspace.go", found)
	}
}
