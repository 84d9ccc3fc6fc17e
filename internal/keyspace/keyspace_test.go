package keyspace

import (
	"errors"
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
