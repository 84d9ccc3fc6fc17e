package redisq

import (
	"errors"
	"testing"

	"smsgw/internal/keyspace"
	"smsgw/internal/queue"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

// TestKeyNamesUnchanged: the queue's key names are what every release
// wrote, so that messages already in Redis stay readable across an upgrade.
func TestKeyNamesUnchanged(t *testing.T) {
	t.Parallel()
	k := newKeys("acct")
	for _, tc := range []struct{ got, want string }{
		{k.msgs(), "{smsgw:acct}:q:msgs"},
		{k.leases(), "{smsgw:acct}:q:leases"},
		{k.seq(), "{smsgw:acct}:q:seq"},
		{k.done(), "{smsgw:acct}:q:done"},
		{k.outstanding(), "{smsgw:acct}:q:outstanding"},
		{k.ready(sms.ClassOTP), "{smsgw:acct}:q:ready:otp"},
		{k.lease(sms.ClassTransactional), "{smsgw:acct}:q:lease:transactional"},
		{k.dead(sms.ClassMarketing), "{smsgw:acct}:q:dead:marketing"},
		{k.finAt(1700000000), "{smsgw:acct}:q:fin:1700000000"},
		{k.finBlob(1700000000), "{smsgw:acct}:q:fz:1700000000"},
		{k.finDue(), "{smsgw:acct}:q:fz:due"},
		{k.idem("p", "k"), // sha256("p\x00k")[:16]
			"{smsgw:acct}:q:idem:776e9c643a14b5e91d039a77beb6dd51"},
	} {
		if tc.got != tc.want {
			t.Errorf("key %q, want %q", tc.got, tc.want)
		}
	}
	for _, bad := range []string{"", "a{b}", "a:b", "a b"} {
		if _, err := New(Config{Client: redistest.Client(t), Account: bad}); !errors.Is(err, keyspace.ErrInvalidAccount) {
			t.Errorf("New with account %q = %v, want keyspace.ErrInvalidAccount", bad, err)
		}
	}
}

// TestScriptsCountThreeClasses: completeScript's prune loop (KEYS[7..9]),
// statsScript (KEYS[4..9]) and cancelScript (KEYS[3..5], then the outbox at
// KEYS[6..9]) place their keys for exactly three classes, one key each.
// A fourth class must move those positions first, or the scripts would
// hand keys of the wrong type to Redis commands; this test fails until it
// is added here too.
func TestScriptsCountThreeClasses(t *testing.T) {
	if len(sms.Classes) != 3 || len(queue.RecordClasses()) != 3 {
		t.Fatalf("%d classes (%d class codes): move the per-class key positions of completeScript, statsScript and cancelScript, then this test",
			len(sms.Classes), len(queue.RecordClasses()))
	}
	k := newKeys("t")
	if n := len(k.perClass(k.dead)); n != 3 {
		t.Fatalf("perClass gives %d keys, the scripts place 3", n)
	}
}
