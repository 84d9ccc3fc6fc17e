package state

import (
	"testing"

	"go.uber.org/goleak"

	"smsgw/internal/keyspace"
	"smsgw/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newSpace returns the key space of a fresh account whose keys are deleted
// from the shared Redis when the test ends.
func newSpace(t testing.TB) keyspace.Space {
	t.Helper()
	sp, err := keyspace.New(redistest.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteKeys(t, sp) })
	return sp
}

// deleteKeys removes every key of sp's account from the shared Redis.
func deleteKeys(t testing.TB, sp keyspace.Space) { redistest.DeleteTagged(t, sp.Tag()) }
