package state

import (
	"testing"

	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"

	"smsgw/internal/redistest"
)

// legacyEntry is an entry as the release before sources stored it: no
// "source" member.
const legacyEntry = `{"id":"legacy1","masked":"+8190****5678","reason":"asked by phone","created_at":"2025-01-02T03:04:05Z"}`

// checkLegacy: an entry stored without a source lists as an operator's and
// a recipient's opt-in keeps it.
func checkLegacy(t *testing.T, s Suppressions) {
	t.Helper()
	list, err := s.List(t.Context(), "", 10)
	if err != nil || len(list) != 1 || list[0].ID != "legacy1" || list[0].Source != SourceOperator || list[0].Reason != "asked by phone" {
		t.Fatalf("List = %+v, %v; want the legacy entry as an operator's", list, err)
	}
	if got, err := s.Lift(t.Context(), "legacy1", SourceRecipient, SourceProvider); err != nil || got != LiftKept {
		t.Fatalf("Lift of the legacy entry by the recipient = %v, %v; want kept", got, err)
	}
	if got, err := s.Contains(t.Context(), []string{"legacy1"}); err != nil || !got[0] {
		t.Fatalf("Contains after Lift = %v, %v", got, err)
	}
}

// TestLegacySuppressionRedis: an entry written by the previous release into
// the Redis HASH reads as an operator's, and the lift script keeps it.
func TestLegacySuppressionRedis(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	t.Cleanup(func() { _ = c.Close() })
	sp := newSpace(t)
	k := newKeys(sp)
	if err := c.HSet(t.Context(), k.suppressions(), "legacy1", legacyEntry).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ZAdd(t.Context(), k.suppressionIndex(), redis.Z{Member: "legacy1"}).Err(); err != nil {
		t.Fatal(err)
	}
	s, err := NewRedisSuppressions(c, sp, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkLegacy(t, s)
}

// TestLegacySuppressionLocal: the same for an entry in protection.db.
func TestLegacySuppressionLocal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := OpenLocalSuppressions(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	err = s.db.Update(func(tx *bolt.Tx) error {
		if err := writeCount(tx, 1); err != nil {
			return err
		}
		return tx.Bucket(bSuppressed).Put([]byte("legacy1"), []byte(legacyEntry))
	})
	if err != nil {
		t.Fatal(err)
	}
	checkLegacy(t, s)
}
