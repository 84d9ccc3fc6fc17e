package tests

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
	"smsgw/internal/redistest"
)

// TestAccountsSpreadOverClusterSlots: the account is the hash tag of every
// key, so one account's keys share one slot (its scripts run on one node)
// and many accounts spread over the Cluster's slots and masters like any
// hashed key. A real Cluster computes the slots (CLUSTER KEYSLOT).
func TestAccountsSpreadOverClusterSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	addrs := redistest.StartCluster(t)
	ctx := context.Background()
	const accounts = 1000
	// Keys of every kind the packages build (queue, limiter, API state,
	// dispatch guard, history), all from keyspace.
	kinds := [][]string{{"q", "msgs"}, {"q", "ready", "otp"}, {"limit", "global"}, {"api", "pause"}, {"dispatch", "throttles"}, {"history", "5000", "1"}}
	node := redis.NewClient(&redis.Options{Addr: addrs[0]})
	defer func() { _ = node.Close() }()
	slotOf := map[string]int64{}
	bySlot := map[int64]int{}
	for i := range accounts {
		sp, err := keyspace.New(fmt.Sprintf("acct-%04d", i))
		if err != nil {
			t.Fatal(err)
		}
		pipe := node.Pipeline()
		cmds := make([]*redis.IntCmd, len(kinds))
		for j, k := range kinds {
			cmds[j] = pipe.ClusterKeySlot(ctx, sp.Key(k...))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		for j, cmd := range cmds {
			if cmd.Val() != cmds[0].Val() {
				t.Fatalf("account %s: key %v in slot %d, its first key in %d", sp.Account(), kinds[j], cmd.Val(), cmds[0].Val())
			}
		}
		slotOf[sp.Account()] = cmds[0].Val()
		bySlot[cmds[0].Val()]++
	}
	// Which master serves each account's slot.
	perMaster := map[string]int{}
	for _, s := range slotOf {
		m, err := redistest.SlotMaster(ctx, node, s)
		if err != nil {
			t.Fatal(err)
		}
		perMaster[m]++
	}
	most := 0
	for _, n := range bySlot {
		most = max(most, n)
	}
	t.Logf("%d accounts: %d distinct slots of 16384 (at most %d accounts in one), per master %v", accounts, len(bySlot), most, perMaster)
	// 1,000 uniform draws from 16,384 slots leave ~30 collisions.
	if len(bySlot) < 900 {
		t.Errorf("%d accounts fall in only %d slots", accounts, len(bySlot))
	}
	if len(perMaster) != 3 {
		t.Fatalf("accounts on %d masters, want 3", len(perMaster))
	}
	for m, n := range perMaster {
		if n < accounts/4 || n > accounts*5/12 {
			t.Errorf("master %s serves %d of %d accounts; want about a third", m, n, accounts)
		}
	}
}
