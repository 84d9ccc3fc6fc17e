package tests

import (
	"testing"
	"time"

	"smsgw/internal/redistest"
)

// A gateway killed with SIGKILL mid-campaign loses nothing: its leased
// messages are handed on when their lease expires, and nothing reaches the
// handset twice.
func TestReplicaKilledMidCampaign(t *testing.T) {
	skipShort(t)
	sim := startSim(t, "--limit", "100", "--window", "sliding")
	acct := redistest.Prefix(t)
	var gws []*gwProc
	for i := 0; i < 3; i++ {
		gws = append(gws, startGateway(t, "gw"+string(rune('a'+i)), gwOptions{RedisAddr: redistest.Addr(t), Account: acct, SimURL: sim.URL, Lease: 2 * time.Second}))
	}
	var ids []string
	for i, gw := range gws {
		ids = append(ids, postBatch(t, gw, keyMarketing, "marketing", i*150, 150)...)
	}
	// 250 are left when the replica dies: 3.5 s at marketing's cap, past
	// the 2 s lease of what it held.
	sim.WaitAccepted(t, 200, 30*time.Second)
	gws[1].Kill()
	sim.WaitAccepted(t, len(ids), 60*time.Second)
	time.Sleep(3 * time.Second) // a late duplicate would arrive after the lease
	st := sim.Stats(t)
	recs := sim.Accepted(t)
	checkExactlyOnce(t, recs, ids)
	if st.Rejected429 != 0 || st.MaxInAny1s > 100 {
		t.Errorf("after the kill: 429s %d, max in any 1 s %d", st.Rejected429, st.MaxInAny1s)
	}
	t.Logf("killed 1 of 3 after %d sends: %d/%d delivered, duplicates %d, retries absorbed by the provider's idempotency key %d",
		200, st.Accepted, len(ids), st.Duplicates, st.Replays)
}

// The provider throttles everything for 3 s: every gateway pauses on the
// first 429 it or another replica sees, so each sees at most one, and the
// account is never suspended.
func TestProviderThrottlesEverything(t *testing.T) {
	skipShort(t)
	sim := startSim(t, "--limit", "100", "--window", "sliding")
	acct := redistest.Prefix(t)
	var gws []*gwProc
	for i := 0; i < 3; i++ {
		gws = append(gws, startGateway(t, "gw"+string(rune('a'+i)), gwOptions{RedisAddr: redistest.Addr(t), Account: acct, SimURL: sim.URL}))
	}
	var ids []string
	for i, gw := range gws {
		ids = append(ids, postBatch(t, gw, keyMarketing, "marketing", i*100, 100)...)
	}
	// 200 are left when the throttle starts: sends are under way in it.
	sim.WaitAccepted(t, 100, 30*time.Second)
	sim.Control(t, `{"throttle_all_for":"3s"}`)
	st := sim.WaitAccepted(t, len(ids), 60*time.Second)
	if st.Rejected429 > len(gws) {
		t.Errorf("provider answered %d 429s to %d gateways; want at most one each", st.Rejected429, len(gws))
	}
	if st.Rejected429 == 0 {
		t.Errorf("no 429 at all: the throttle did not happen while sending")
	}
	if st.Suspended || st.Suspensions > 0 {
		t.Errorf("account suspended")
	}
	checkExactlyOnce(t, sim.Accepted(t), ids)
	t.Logf("throttle 3 s: %d 429s across %d gateways, %d delivered", st.Rejected429, len(gws), st.Accepted)
}

// Redis (with AOF) stops for 10 s and comes back: sending resumes and
// nothing accepted is lost or sent twice.
func TestRedisRestartLosesNothing(t *testing.T) {
	skipShort(t)
	rs := redistest.StartServer(t, redistest.ServerOptions{AppendOnly: true})
	sim := startSim(t, "--limit", "100", "--window", "sliding")
	acct := redistest.Prefix(t)
	var gws []*gwProc
	for i := 0; i < 2; i++ {
		gws = append(gws, startGateway(t, "gw"+string(rune('a'+i)), gwOptions{RedisAddr: rs.Addr, Account: acct, SimURL: sim.URL, Lease: 3 * time.Second}))
	}
	var ids []string
	for i, gw := range gws {
		ids = append(ids, postBatch(t, gw, keyMarketing, "marketing", i*300, 300)...)
	}
	// 450 are left when Redis stops, sent after it is back.
	sim.WaitAccepted(t, 150, 30*time.Second)
	rs.Stop()
	down := sim.Stats(t).Accepted
	time.Sleep(10 * time.Second)
	during := sim.Stats(t).Accepted - down
	rs.Start()
	sim.WaitAccepted(t, len(ids), 90*time.Second)
	time.Sleep(4 * time.Second) // a lease-expiry duplicate would arrive by now
	st := sim.Stats(t)
	checkExactlyOnce(t, sim.Accepted(t), ids)
	if st.Rejected429 != 0 || st.MaxInAny1s > 100 {
		t.Errorf("429s %d, max in any 1 s %d", st.Rejected429, st.MaxInAny1s)
	}
	t.Logf("Redis down 10 s: %d sends during the outage, %d/%d delivered after, duplicates %d, retries absorbed by the provider's idempotency key %d",
		during, st.Accepted, len(ids), st.Duplicates, st.Replays)
}
