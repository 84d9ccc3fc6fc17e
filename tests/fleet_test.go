package tests

// Fleet runs: many gateway processes on one Redis. The long ones are opt-in
// (go test -run TestFleet ./tests/ -fleet, or SMSGW_FLEET=1) so that the
// default test run stays short; their figures are logged (t.Log) and kept
// in docs/scale.md section 7, never asserted as wall-clock bounds. What they assert is
// correctness: no 429, no second over the contract, nothing lost or
// duplicated.

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
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
	before, allBefore := redistest.CommandStats(t, c)
	cliBefore := clientCommands(t, c)
	time.Sleep(d)
	after, allAfter := redistest.CommandStats(t, c)
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
		within := func() (float64, float64) { return takenWithin(t, gws, class, "0.005") }
		in0, all0 := within()
		lat := enqueueElsewhere(t, sim, srv, acct, class, 20)
		in1, all1 := within()
		t.Logf("%s enqueued by another process, %d idle replicas: enqueue → provider p50 %.1f ms, max %.1f ms; "+
			"enqueue → provider call started (taken and reserved) within 5 ms: %.0f of %.0f",
			class, n, lat[len(lat)/2], lat[len(lat)-1], in1-in0, all1-all0)
	}
	_ = gws
}

// takenWithin sums, over the fleet, the queue → provider-call histogram of
// class (from when a message was ready to when its provider call started:
// the take and the reservation): the count at or under le seconds, and the
// count of all.
func takenWithin(t *testing.T, gws []*gwProc, class, le string) (within, all float64) {
	t.Helper()
	name := `smsgw_dispatch_queue_to_provider_seconds_bucket{class="` + class + `",le="`
	for _, gw := range gws {
		within += seriesValue(t, gw, name+le+`"}`)
		all += seriesValue(t, gw, name+`+Inf"}`)
	}
	return within, all
}

// seriesValue is the value of one exact series on gw's /metrics (0 when absent).
func seriesValue(t *testing.T, gw *gwProc, series string) float64 {
	t.Helper()
	var out float64
	eachSample(t, gw, func(s string, v float64) {
		if s == series {
			out = v
		}
	})
	return out
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
	// A producer's connection is open before it enqueues: the first
	// enqueue must not time this client's dial and handshake.
	if err := c.Ping(context.Background()).Err(); err != nil {
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

// fleetRun is one campaign through a fleet: marketing spread over the
// replicas, OTP at 5/s alternating between the fast path (POST /v1/otp)
// and the queue, round-robin over the replicas.
type fleetRun struct {
	campaign []string
	otpFast  []string
	otpQueue []string
	refused  int      // fast-path 503s and queued-OTP 503s (Redis down): nothing kept, not lost
	steps    otpSteps // the fast path's steps by id (Server-Timing)
}

func runFleetCampaign(t *testing.T, sim *simProc, gws []*gwProc, campaign int, during func()) *fleetRun {
	t.Helper()
	r := &fleetRun{steps: otpSteps{}}
	r.campaign = postCampaign(t, gws, campaign)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			gw := gws[i%len(gws)]
			to, body := phone(800000+i), "Your code is "+strconv.Itoa(100000+i)
			if i%2 == 0 {
				res := post(t, gw.URL+"/v1/otp", keyOTP, map[string]string{"to": to, "body": body})
				switch res.Status {
				case http.StatusOK:
					r.otpFast = append(r.otpFast, res.ID)
					r.steps.add(res.ID, res.Header)
				case http.StatusServiceUnavailable:
					r.refused++
				default:
					t.Errorf("otp fast path: %d %s", res.Status, res.Body)
					return
				}
				continue
			}
			res := post(t, gw.URL+"/v1/messages", keyOTP, message{To: to, Body: body, Class: "otp"})
			switch res.Status {
			case http.StatusAccepted:
				r.otpQueue = append(r.otpQueue, res.ID)
			case http.StatusServiceUnavailable:
				r.refused++
			default:
				t.Errorf("otp post: %d %s", res.Status, res.Body)
				return
			}
		}
	}()
	if during != nil {
		during()
	}
	deadline := time.Now().Add(time.Duration(campaign/50+120) * time.Second)
	for time.Now().Before(deadline) {
		if st := sim.Stats(t); st.PerClass["marketing"] >= campaign {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	close(stop)
	<-done
	sim.WaitAccepted(t, len(r.campaign)+len(r.otpFast)+len(r.otpQueue), 60*time.Second)
	return r
}

// pct returns the p-th percentile (0..1) of sorted xs.
func pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[min(len(xs)-1, int(p*float64(len(xs))))]
}

// otpLatencies are the arrival-to-provider times (ms, sorted) of ids.
func otpLatencies(recs []simRecord, ids []string) []float64 {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var out []float64
	for _, r := range recs {
		if want[r.Reference] && !r.AcceptedAt.IsZero() {
			out = append(out, float64(r.Arrived.Sub(r.AcceptedAt).Microseconds())/1000)
		}
	}
	sort.Float64s(out)
	return out
}

// sendGap is the longest time the provider received nothing between the
// first and the last record, read on the simulator's monotonic clock (a
// step of the wall clock is not a pause), and the wall-clock time of the
// record before it.
func sendGap(recs []simRecord) (time.Duration, time.Time) {
	sorted := slices.Clone(recs)
	slices.SortFunc(sorted, func(a, b simRecord) int { return cmp.Compare(a.Elapsed, b.Elapsed) })
	var gap time.Duration
	var at time.Time
	for i := 1; i < len(sorted); i++ {
		if d := sorted[i].Elapsed - sorted[i-1].Elapsed; d > gap {
			gap, at = d, sorted[i-1].At
		}
	}
	return gap, at
}

// checkFleet asserts the contract (no 429, never more than the contract in
// any second, every accepted id exactly once) and logs the figures.
func checkFleet(t *testing.T, label string, sim *simProc, r *fleetRun) {
	t.Helper()
	st := sim.Stats(t)
	recs := sim.Accepted(t)
	if st.Rejected429 != 0 || st.Rejected403 != 0 {
		t.Errorf("provider answered %d 429s and %d 403s; want none", st.Rejected429, st.Rejected403)
	}
	worst := maxInAnyInterval(recs, time.Second)
	if worst > 100 {
		t.Errorf("provider saw %d messages within one second; contract is 100", worst)
	}
	checkExactlyOnce(t, recs, r.campaign, r.otpFast, r.otpQueue)
	rate, _ := classRate(recs, "marketing")
	fast, queued := otpLatencies(recs, r.otpFast), otpLatencies(recs, r.otpQueue)
	gap, gapAt := sendGap(recs)
	t.Logf("%s: campaign %d, OTP fast path %d (p50 %.1f ms, p99 %.1f ms, max %.1f ms), OTP queued %d (p50 %.1f ms, p99 %.1f ms, max %.1f ms), refused %d; 429s %d, worst 1 s %d (target+burst 95, contract 100), marketing %.1f/s, longest pause at the provider %s (at %s)",
		label, len(r.campaign), len(fast), pct(fast, .5), pct(fast, .99), pct(fast, 1), len(queued), pct(queued, .5), pct(queued, .99), pct(queued, 1),
		r.refused, st.Rejected429, worst, rate, gap.Round(time.Millisecond), gapAt.Format("15:04:05.000"))
	r.steps.log(t, label+", OTP fast path", recs)
}

// TestFleetCampaign: n replicas (23 by default, the seed's max_senders) on
// one Redis against a strict sliding-window provider: a campaign and OTP
// at 5/s. Asserted: no 429, the contract in every second, exactly once.
// Logged: the OTP latency of both paths.
func TestFleetCampaign(t *testing.T) {
	fleetOnly(t)
	n := fleetSize(t, 23)
	srv := startPrivateRedis(t)
	sim := startSim(t, "--limit", "100", "--window", "sliding")
	gws := startFleet(t, n, gwOptions{RedisAddr: srv, Account: "fleet", SimURL: sim.URL})
	r := runFleetCampaign(t, sim, gws, 2400, nil)
	checkFleet(t, fmt.Sprintf("%d replicas", n), sim, r)
}

// TestFleetRedisOutage: the same with Redis stopped for 10 s mid-run. Each
// replica falls back to target/max_senders; nothing accepted is lost.
func TestFleetRedisOutage(t *testing.T) {
	fleetOnly(t)
	n := fleetSize(t, 23)
	rs := redistest.StartServer(t, redistest.ServerOptions{AppendOnly: true})
	sim := startSim(t, "--limit", "100", "--window", "sliding")
	gws := startFleet(t, n, gwOptions{RedisAddr: rs.Addr, Account: "fleet", SimURL: sim.URL})
	r := runFleetCampaign(t, sim, gws, 2400, func() {
		sim.WaitAccepted(t, 600, 60*time.Second)
		rs.Stop()
		t.Logf("Redis stopped at %s", time.Now().Format("15:04:05.000"))
		time.Sleep(10 * time.Second)
		rs.Start()
		t.Logf("Redis back at %s", time.Now().Format("15:04:05.000"))
	})
	checkFleet(t, fmt.Sprintf("%d replicas, Redis stopped 10 s", n), sim, r)
}

// failoverReport logs what a failover cost, from the provider's records:
// 429s, the worst second, lost and duplicated messages, and how long the
// provider received nothing around the failover. The contract (no 429, at
// most 100 in any second) is asserted; losses are reported (the bound is
// in docs/scale.md: writes a dying master acknowledged before they reached
// its replica may be lost).
func failoverReport(t *testing.T, label string, sim *simProc, r *fleetRun, killedAt time.Time) {
	t.Helper()
	st := sim.Stats(t)
	recs := sim.Accepted(t)
	if st.Rejected429 != 0 {
		t.Errorf("provider answered %d 429s; want none", st.Rejected429)
	}
	worst := maxInAnyInterval(recs, time.Second)
	if worst > 100 {
		t.Errorf("provider saw %d messages within one second; contract is 100", worst)
	}
	lost, dup, extra, n := deliveries(recs, r.campaign, r.otpFast, r.otpQueue)
	// The pause around the failover: the longest gap that ends after the kill.
	var stopped time.Duration
	ts := make([]time.Time, 0, len(recs))
	for _, rec := range recs {
		ts = append(ts, rec.At)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	for i := 1; i < len(ts); i++ {
		if ts[i].After(killedAt) && ts[i].Sub(ts[i-1]) > stopped {
			stopped = ts[i].Sub(ts[i-1])
		}
	}
	t.Logf("%s: %d accepted ids: %d lost, %d duplicated, %d unknown; 429s %d, worst 1 s %d, sending stopped for %s around the failover; OTP refused (503) %d",
		label, n, lost, dup, extra, st.Rejected429, worst, stopped.Round(time.Millisecond), r.refused)
}

// accountKey is a key of the account's hash tag (its Cluster slot).
func accountKey(t *testing.T, acct string) string {
	t.Helper()
	sp, err := keyspace.New(acct)
	if err != nil {
		t.Fatal(err)
	}
	return sp.Key("probe")
}

// TestFleetClusterFailover: a fleet on a 3-master, 3-replica Cluster; the
// master of the account's slot is killed mid-campaign and its replica
// promoted by the cluster itself.
func TestFleetClusterFailover(t *testing.T) {
	fleetOnly(t)
	n := fleetSize(t, 5)
	cl := redistest.StartClusterWithReplicas(t, time.Second)
	sim := startSim(t, "--limit", "100", "--window", "sliding")
	acct := "fleet"
	gws := startFleet(t, n, gwOptions{RedisAddr: strings.Join(cl.Addrs, ","), Account: acct, SimURL: sim.URL})
	var killedAt time.Time
	r := runFleetCampaign(t, sim, gws, 2400, func() {
		sim.WaitAccepted(t, 600, 60*time.Second)
		old := cl.MasterOf(accountKey(t, acct))
		killedAt = time.Now()
		cl.Servers[old].Kill()
		nm := cl.WaitMaster(accountKey(t, acct), old, 60*time.Second)
		t.Logf("master %s of the account's slot killed; %s promoted after %s", old, nm, time.Since(killedAt).Round(time.Millisecond))
	})
	failoverReport(t, fmt.Sprintf("%d replicas, Cluster failover", n), sim, r, killedAt)
}

// TestFleetSentinelFailover: the same with one master, one replica and
// three sentinels.
func TestFleetSentinelFailover(t *testing.T) {
	fleetOnly(t)
	n := fleetSize(t, 5)
	g := redistest.StartSentinel(t, time.Second)
	sim := startSim(t, "--limit", "100", "--window", "sliding")
	gws := startFleet(t, n, gwOptions{RedisAddr: strings.Join(g.Sentinels, ","), RedisMaster: g.MasterName, Account: "fleet", SimURL: sim.URL})
	var killedAt time.Time
	r := runFleetCampaign(t, sim, gws, 2400, func() {
		sim.WaitAccepted(t, 600, 60*time.Second)
		old := g.MasterAddr()
		killedAt = time.Now()
		g.Master.Kill()
		deadline := time.Now().Add(60 * time.Second)
		for g.MasterAddr() == old {
			if time.Now().After(deadline) {
				t.Fatal("the sentinels did not fail over within 60 s")
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("master %s killed; the sentinels promoted %s after %s", old, g.MasterAddr(), time.Since(killedAt).Round(time.Millisecond))
	})
	failoverReport(t, fmt.Sprintf("%d replicas, Sentinel failover", n), sim, r, killedAt)
}
