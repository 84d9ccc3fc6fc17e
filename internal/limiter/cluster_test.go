package limiter

import (
	"testing"
	"time"

	"smsgw/internal/redistest"
)

// TestClusterScriptsStayInOneSlot runs every script on a real 3-master
// Redis Cluster: a script whose keys spanned slots would fail there with
// CROSSSLOT. Skipped only with SMSGW_SKIP_CLUSTER=1.
func TestClusterScriptsStayInOneSlot(t *testing.T) {
	t.Parallel()
	addrs := redistest.StartCluster(t)
	cc := redistest.ClusterClient(t, addrs)
	// Marketing is slow so that its schedule is still ahead when State reads
	// it, however long a loaded machine takes between the two calls.
	cfg := Config{Global: Rate{PerSecond: 100, Burst: 5}, Classes: map[string]Rate{"marketing": {PerSecond: 0.1, Burst: 3}}}
	// Several accounts, so that the tags land on different masters.
	for _, account := range []string{"main", "eu", "backup", redistest.Prefix(t)} {
		r, err := NewRedis(cc, account, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, class := range []string{"marketing", "otp"} {
			if d, err := r.Reserve(bg, Request{Class: class, Cost: 1, MaxWait: time.Second}); err != nil || !d.Allowed {
				t.Fatalf("%s: reserve %s on the cluster: %+v %v", account, class, d, err)
			}
		}
		st, err := r.State(bg)
		if err != nil || st.Keys[1].Ahead <= 0 {
			t.Fatalf("%s: state on the cluster: %+v %v", account, st, err)
		}
		s, err := NewShared(SharedConfig{Redis: r, MaxSenders: 2})
		if err != nil {
			t.Fatal(err)
		}
		if d, err := s.Reserve(bg, Request{Class: "marketing", Cost: 1, MaxWait: time.Second}); err != nil || d.Mode != ModeShared {
			t.Fatalf("%s: shared on the cluster: %+v %v", account, d, err)
		}
		keys, err := NewRedisKeys(cc, account)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := keys.Allow(bg, "producer", Rate{PerSecond: 10, Burst: 1}, 1); err != nil || !d.Allowed {
			t.Fatalf("%s: ingress allow on the cluster: %+v %v", account, d, err)
		}
		// Last, as it stops every reservation of the account: a pause long
		// enough to be still on when State reads it.
		if err := r.Pause(bg, time.Minute); err != nil {
			t.Fatalf("%s: pause on the cluster: %v", account, err)
		}
		if st, err := r.State(bg); err != nil || st.PauseRemaining <= 0 {
			t.Fatalf("%s: state after pause on the cluster: %+v %v", account, st, err)
		}
		// And the keys really are in one slot.
		slot := int64(-1)
		for _, k := range []string{r.keys.pause(), r.keys.global(), r.keys.class("marketing"), r.keys.ingress("producer")} {
			got, err := cc.ClusterKeySlot(bg, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if slot >= 0 && got != slot {
				t.Fatalf("%s in slot %d, others in %d", k, got, slot)
			}
			slot = got
		}
	}
}
