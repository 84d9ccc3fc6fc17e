package limiter

import (
	"errors"
	"testing"

	"smsgw/internal/keyspace"
	"smsgw/internal/redistest"
)

// TestKeyNamesUnchanged: the limiter's key names are what every release
// wrote, so that a schedule or pause already in Redis stays in force across
// an upgrade.
func TestKeyNamesUnchanged(t *testing.T) {
	t.Parallel()
	k, err := newKeySet("acct")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ got, want string }{
		{k.pause(), "{smsgw:acct}:limiter:pause"},
		{k.global(), "{smsgw:acct}:limiter:global"},
		{k.class("marketing"), "{smsgw:acct}:limiter:class:marketing"},
		{k.ingress("notify"), "{smsgw:acct}:ingress:notify"},
	} {
		if tc.got != tc.want {
			t.Errorf("key %q, want %q", tc.got, tc.want)
		}
	}
	client := redistest.Client(t)
	for _, bad := range []string{"", "a{b}", "a:b"} {
		if _, err := NewRedisKeys(client, bad); !errors.Is(err, keyspace.ErrInvalidAccount) {
			t.Errorf("NewRedisKeys(%q) = %v, want keyspace.ErrInvalidAccount", bad, err)
		}
		if _, err := NewRedis(client, bad, Config{Global: Rate{PerSecond: 1, Burst: 1}}); !errors.Is(err, keyspace.ErrInvalidAccount) {
			t.Errorf("NewRedis(%q) = %v, want keyspace.ErrInvalidAccount", bad, err)
		}
	}
}
