package demo

import "testing"

// The printed URLs must be reachable: a wildcard listen address becomes
// localhost, a concrete one stays as it is.
func TestHostForURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"127.0.0.1:8080": "127.0.0.1:8080",
		"0.0.0.0:8080":   "localhost:8080",
		"[::]:9000":      "localhost:9000",
		":8080":          "localhost:8080",
		"[::1]:8080":     "[::1]:8080",
	} {
		if got := hostForURL(in); got != want {
			t.Errorf("hostForURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every message of a campaign goes to its own valid-looking number.
func TestPhonesAreDistinct(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for i := range 5000 {
		p := phone(i)
		if len(p) != 13 || p[:5] != "+8190" || seen[p] {
			t.Fatalf("phone(%d) = %q (seen before: %v)", i, p, seen[p])
		}
		seen[p] = true
	}
}
