package state

import (
	"testing"

	"smsgw/internal/keyspace"
)

// TestKeyNamesUnchanged: the names are those the gateway and dispatch
// wrote before this package existed, so answers, the pause, the counters and
// the 429 window already in Redis stay in force across an upgrade.
func TestKeyNamesUnchanged(t *testing.T) {
	t.Parallel()
	sp, err := keyspace.New("acct")
	if err != nil {
		t.Fatal(err)
	}
	k := newKeys(sp)
	for _, tc := range []struct{ got, want string }{
		{k.idemAnswer("0a1b"), "{smsgw:acct}:api:ans:0a1b"},
		{k.idemLock("0a1b"), "{smsgw:acct}:api:idemlock:0a1b"},
		{k.pause(), "{smsgw:acct}:api:pause"},
		{k.counters(), "{smsgw:acct}:api:counters"},
		{k.throttles(), "{smsgw:acct}:dispatch:throttles"},
		{k.otpNumber("0a1b"), "{smsgw:acct}:protect:otp:0a1b"},
		{k.suppressions(), "{smsgw:acct}:protect:suppressed"},
		{k.suppressionIndex(), "{smsgw:acct}:protect:suppressed:index"},
		{k.numberKey(), "{smsgw:acct}:protect:numberkey"},
		{k.stickySender("0a1b"), "{smsgw:acct}:api:pool:0a1b"},
	} {
		if tc.got != tc.want {
			t.Errorf("key %q, want %q", tc.got, tc.want)
		}
	}
}
