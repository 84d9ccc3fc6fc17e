package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Failover setups for tests: a Redis Cluster whose masters have replicas,
// and a Sentinel group. Both are real redis-server processes on free ports.

// Cluster is a Redis Cluster of 3 masters, each with one replica.
type Cluster struct {
	Addrs   []string           // every node (seeds for redis.NewClusterClient)
	Servers map[string]*Server // by address
	t       testing.TB
}

// StartClusterWithReplicas starts 3 masters and 3 replicas with a short
// cluster-node-timeout (nodeTimeout; 0: 1 s), so that a replica is
// promoted a few seconds after its master dies.
func StartClusterWithReplicas(t testing.TB, nodeTimeout time.Duration) *Cluster {
	t.Helper()
	if os.Getenv(SkipClusterEnv) == "1" {
		t.Skipf("redistest: %s=1, skipping Redis Cluster test", SkipClusterEnv)
	}
	if nodeTimeout <= 0 {
		nodeTimeout = time.Second
	}
	c := &Cluster{Servers: map[string]*Server{}, t: t}
	for i := 0; i < 6; i++ {
		s := StartServer(t, ServerOptions{AppendOnly: true, Args: []string{"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10)}})
		c.Addrs = append(c.Addrs, s.Addr)
		c.Servers[s.Addr] = s
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary(t, "redis-cli"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := waitClusterOK(c.Addrs, 30*time.Second); err != nil {
		t.Fatalf("redistest: cluster did not become ok: %v", err)
	}
	if err := c.waitReplicasOnline(30 * time.Second); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return c
}

// waitReplicasOnline waits until every master reports one online replica.
func (c *Cluster) waitReplicasOnline(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		online := 0
		for _, a := range c.Addrs {
			cl := redis.NewClient(&redis.Options{Addr: a})
			info, err := cl.Info(context.Background(), "replication").Result()
			_ = cl.Close()
			if err == nil && strings.Contains(info, "role:master") && strings.Contains(info, "state=online") {
				online++
			}
		}
		if online == 3 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of 3 masters have an online replica after %s", online, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// MasterOf returns the address of the master that holds key's slot now.
func (c *Cluster) MasterOf(key string) string {
	c.t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	defer func() { _ = cc.Close() }()
	ctx := context.Background()
	slot, err := cc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		c.t.Fatalf("redistest: CLUSTER KEYSLOT: %v", err)
	}
	m, err := SlotMaster(ctx, cc, slot)
	if err != nil {
		c.t.Fatalf("redistest: %v", err)
	}
	return m
}

// WaitMaster waits until a node other than old is the master of key's
// slot, as every live node sees it, and returns it.
func (c *Cluster) WaitMaster(key, old string, within time.Duration) string {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if m := c.masterSeenBy(key, old); m != "" && m != old {
			return m
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("redistest: no new master for %q within %s", key, within)
	return ""
}

func (c *Cluster) masterSeenBy(key, dead string) string {
	for _, a := range c.Addrs {
		if a == dead {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		slot, err := cl.ClusterKeySlot(ctx, key).Result()
		var m string
		if err == nil {
			m, err = SlotMaster(ctx, cl, slot)
		}
		cancel()
		_ = cl.Close()
		if err == nil {
			return m
		}
	}
	return ""
}

// Sentinel is one master, one replica and three sentinels watching them
// under MasterName.
type Sentinel struct {
	MasterName string
	Master     *Server
	Replica    *Server
	Sentinels  []string // addresses of the sentinels
}

// StartSentinel starts the group; a master that does not answer for
// downAfter (0: 1 s) is failed over to the replica.
func StartSentinel(t testing.TB, downAfter time.Duration) *Sentinel {
	t.Helper()
	if downAfter <= 0 {
		downAfter = time.Second
	}
	g := &Sentinel{MasterName: "smsgw-test"}
	g.Master = StartServer(t, ServerOptions{AppendOnly: true})
	g.Replica = StartServer(t, ServerOptions{AppendOnly: true, Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(g.Master.Port)}})
	if err := waitReplicaOnline(g.Master.Addr, 20*time.Second); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	for i := 0; i < 3; i++ {
		port := freePort(t)
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d 2\nsentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 10000\nsentinel parallel-syncs %s 1\n",
			port, dir, g.MasterName, g.Master.Port, g.MasterName, downAfter.Milliseconds(), g.MasterName, g.MasterName)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(binary(t, "redis-server"), conf, "--sentinel", "--logfile", filepath.Join(dir, "sentinel.log")) //nolint:noctx // lives until the test's cleanup kills it, like Server
		if err := cmd.Start(); err != nil {
			t.Fatalf("redistest: start sentinel: %v", err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-done
		})
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if err := waitPing(addr, 10*time.Second); err != nil {
			t.Fatalf("redistest: sentinel on %s did not come up: %v", addr, err)
		}
		g.Sentinels = append(g.Sentinels, addr)
	}
	// Every sentinel must know the replica (and the others) before a
	// failover can pick it.
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range g.Sentinels {
		for {
			sc := redis.NewSentinelClient(&redis.Options{Addr: a})
			reps, err1 := sc.Replicas(context.Background(), g.MasterName).Result()
			sens, err2 := sc.Sentinels(context.Background(), g.MasterName).Result()
			_ = sc.Close()
			if err1 == nil && err2 == nil && len(reps) >= 1 && len(sens) >= 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: sentinel %s does not know the replica and the other sentinels", a)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return g
}

// MasterAddr is the master's address as the first sentinel that answers
// sees it.
func (g *Sentinel) MasterAddr() string {
	for _, a := range g.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a})
		addr, err := sc.GetMasterAddrByName(context.Background(), g.MasterName).Result()
		_ = sc.Close()
		if err == nil && len(addr) == 2 {
			return addr[0] + ":" + addr[1]
		}
	}
	return ""
}

func waitReplicaOnline(master string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		cl := redis.NewClient(&redis.Options{Addr: master})
		info, err := cl.Info(context.Background(), "replication").Result()
		_ = cl.Close()
		if err == nil && strings.Contains(info, "state=online") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the replica of %s is not online after %s", master, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// SlotMaster is the address of the node that serves slot as master now,
// as the node c reaches sees the Cluster (CLUSTER SHARDS).
func SlotMaster(ctx context.Context, c interface {
	ClusterShards(context.Context) *redis.ClusterShardsCmd
}, slot int64) (string, error) {
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("CLUSTER SHARDS: %w", err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start > slot || slot > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" && n.Health == "online" {
					return fmt.Sprintf("%s:%d", n.IP, n.Port), nil
				}
			}
		}
	}
	return "", fmt.Errorf("no online master serves slot %d", slot)
}
