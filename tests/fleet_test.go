package tests

// Fleet runs: many gateway processes on one Redis. The long ones are opt-in
// (go test -run TestFleet ./tests/ -fleet, or SMSGW_FLEET=1) so that the
// default test run stays short; their figures are logged (t.Log) and kept
// in the README, never asserted as wall-clock bounds. What they assert is
// correctness: no 429, no second over the contract, nothing lost or
// duplicated.

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue/redisq"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

var fleetFlag = flag.Bool("fleet", false, "run the long multi-process fleet tests (also SMSGW_FLEET=1)")

// fleetOnly skips t unless the fleet runs were asked for.
func fleetOnly(t *testing.T) {
	t.Helper()
	skipShort(t)
	if !*fleetFlag && os.Getenv("SMSGW_FLEET") != "1" {
		t.Skip("fleet run: opt-in with -fleet or SMSGW_FLEET=1")
	}
}

// fleetSize is the number of replicas of a fleet run: SMSGW_FLEET_N, or
// def (the seed incident's 23 senders).
func fleetSize(t *testing.T, def int) int {
	t.Helper()
	if v := os.Getenv("SMSGW_FLEET_N"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SMSGW_FLEET_N=%q: want a positive number", v)
		}
		return n
	}
	return def
}

// startFleet starts n gateways sharing one Redis and account.
func startFleet(t *testing.T, n int, o gwOptions) []*gwProc {
	t.Helper()
	gws := make([]*gwProc, 0, n)
	for i := range n {
		gws = append(gws, startGateway(t, fmt.Sprintf("gw%02d", i), o))
	}
	return gws
}

// commandStats reads INFO commandstats: calls per command (scripts' own
// calls counted under their commands) and their total.
func commandStats(t *testing.T, c *redis.Client) (map[string]int64, int64) {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	calls := map[string]int64{}
	var total int64
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				calls[strings.TrimPrefix(name, "cmdstat_")] = n
				total += n
			}
		}
	}
	return calls, total
}

// clientCommands reads INFO stats' total_commands_processed: the commands
// clients sent (a script counts once).
func clientCommands(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatalf("INFO stats: %v", err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("INFO stats: no total_commands_processed")
	return 0
}

// idleCost measures what n idle replicas ask Redis over d: commands sent
// by clients per second and replica, and every command (scripts' inner
// calls included) per second and replica, with the busiest commands.
type idleCost struct {
	ClientPerReplica float64
	AllPerReplica    float64
	Top              []string
}

func measureIdle(t *testing.T, c *redis.Client, n int, d time.Duration) idleCost {
	t.Helper()
	before, allBefore := commandStats(t, c)
	cliBefore := clientCommands(t, c)
	time.Sleep(d)
	after, allAfter := commandStats(t, c)
	cliAfter := clientCommands(t, c)
	// our own INFO calls are not the fleet's
	cliAfter -= 2
	allAfter -= 2
	type kv struct {
		k string
		v int64
	}
	var diff []kv
	for k, v := range after {
		if d := v - before[k]; d > 0 && k != "info" {
			diff = append(diff, kv{k, d})
		}
	}
	sort.Slice(diff, func(i, j int) bool { return diff[i].v > diff[j].v })
	ic := idleCost{
		ClientPerReplica: float64(cliAfter-cliBefore) / d.Seconds() / float64(n),
		AllPerReplica:    float64(allAfter-allBefore) / d.Seconds() / float64(n),
	}
	for _, x := range diff[:min(len(diff), 8)] {
		ic.Top = append(ic.Top, fmt.Sprintf("%s %.2f/s/replica", x.k, float64(x.v)/d.Seconds()/float64(n)))
	}
	return ic
}

// TestFleetIdle: n replicas doing nothing. Reports the Redis commands each
// makes per second, and how soon a message enqueued by another process is
// at the provider (it must be taken by an idle replica).
func TestFleetIdle(t *testing.T) {
	fleetOnly(t)
	n := fleetSize(t, 23)
	srv := startPrivateRedis(t)
	sim := startSim(t, "--limit", "100", "--window", "sliding")
	acct := "fleetidle"
	// The product's lease (30 s): the recoverers run every lease/2.
	gws := startFleet(t, n, gwOptions{RedisAddr: srv, Account: acct, SimURL: sim.URL, Lease: 30 * time.Second})
	c := redis.NewClient(&redis.Options{Addr: srv})
	defer func() { _ = c.Close() }()
	time.Sleep(5 * time.Second) // past start-up's own calls
	ic := measureIdle(t, c, n, 30*time.Second)
	t.Logf("%d idle replicas: %.2f client commands/s per replica (%.1f/s in all), %.2f commands/s per replica counting scripts' calls; busiest: %s",
		n, ic.ClientPerReplica, ic.ClientPerReplica*float64(n), ic.AllPerReplica, strings.Join(ic.Top, ", "))

	for _, class := range []string{"otp", "marketing"} {
		lat := enqueueElsewhere(t, sim, srv, acct, class, 20)
		t.Logf("%s enqueued by another process, %d idle replicas: enqueue → provider p50 %.1f ms, max %.1f ms", class, n, lat[len(lat)/2], lat[len(lat)-1])
	}
	_ = gws
}

// startPrivateRedis starts a redis-server of this test alone (its counts
// are the fleet's only) and returns its address.
func startPrivateRedis(t *testing.T) string {
	t.Helper()
	return redistest.StartServer(t, redistest.ServerOptions{}).Addr
}

// enqueueElsewhere enqueues k messages of class one at a time from this
// process (a replica that does not send) and returns, sorted, how many ms
// each took from the enqueue to the provider.
func enqueueElsewhere(t *testing.T, sim *simProc, addr, acct, class string, k int) []float64 {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	q, err := redisq.New(redisq.Config{Client: c, Account: acct})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = q.Close() }()
	cl, err := sms.ParseClass(class)
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
	for i := range k {
		now := time.Now()
		m := &sms.Message{ID: sms.NewID(now), Producer: "elsewhere", Class: cl, To: phone(700000 + i),
			Body: "wake test", Segments: 1, CreatedAt: now, ExpiresAt: now.Add(time.Minute)}
		if _, err := q.Enqueue(context.Background(), m); err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		rec := waitReference(t, sim, m.ID, 10*time.Second)
		out = append(out, float64(rec.Arrived.Sub(now).Microseconds())/1000)
		time.Sleep(time.Duration(100+i*37%150) * time.Millisecond) // off any poll's phase
	}
	sort.Float64s(out)
	return out
}

// waitReference waits until the simulator holds a send with reference ref.
func waitReference(t *testing.T, sim *simProc, ref string, d time.Duration) simRecord {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, r := range sim.Accepted(t) {
			if r.Reference == ref {
				return r
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the provider did not receive %s within %s", ref, d)
	return simRecord{}
}
