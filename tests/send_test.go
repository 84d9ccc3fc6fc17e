package tests

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/redistest"
)

// campaignRun is one multi-process run: n gateways sharing one Redis, one
// simulator, a marketing campaign and an OTP trickle.
type campaignRun struct {
	sim      *simProc
	gws      []*gwProc
	campaign []string // accepted marketing ids
	otp      []string // accepted OTP ids
}

// runCampaign posts a marketing campaign spread over the gateways, then
// trickles OTP through all of them (one every 150 ms) until the campaign is
// delivered.
func runCampaign(t *testing.T, sim *simProc, gws []*gwProc, campaign int) *campaignRun {
	t.Helper()
	r := &campaignRun{sim: sim, gws: gws}
	r.campaign = postCampaign(t, gws, campaign)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(150 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			gw := gws[i%len(gws)]
			res := post(t, gw.URL+"/v1/messages", keyOTP, message{To: phone(500000 + i), Body: "Your code is 123456", Class: "otp"})
			if res.Status != http.StatusAccepted {
				t.Errorf("otp post: %d %s", res.Status, res.Body)
				return
			}
			mu.Lock()
			r.otp = append(r.otp, res.ID)
			mu.Unlock()
		}
	}()
	deadline := time.Now().Add(time.Duration(campaign/60+60) * time.Second)
	for time.Now().Before(deadline) {
		if st := sim.Stats(t); st.PerClass["marketing"] >= campaign {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	n := len(r.campaign) + len(r.otp)
	mu.Unlock()
	sim.WaitAccepted(t, n, 30*time.Second)
	return r
}

// checkExactlyOnce asserts the provider received every accepted id exactly
// once and nothing else.
func checkExactlyOnce(t *testing.T, recs []simRecord, ids ...[]string) {
	t.Helper()
	lost, dup, extra, n := deliveries(recs, ids...)
	if lost+dup+extra > 0 {
		t.Errorf("provider received: %d of %d accepted ids missing, %d duplicated, %d unknown", lost, n, dup, extra)
	}
}

// deliveries counts the accepted ids the provider never received (lost),
// received more than once (dup), and references it received that were
// never accepted (extra), of n accepted ids.
func deliveries(recs []simRecord, ids ...[]string) (lost, dup, extra, n int) {
	want := map[string]bool{}
	for _, set := range ids {
		for _, id := range set {
			want[id] = true
		}
	}
	seen := map[string]int{}
	for _, r := range recs {
		seen[r.Reference]++
	}
	for id := range want {
		switch seen[id] {
		case 0:
			lost++
		case 1:
		default:
			dup++
		}
	}
	for ref := range seen {
		if !want[ref] {
			extra++
		}
	}
	return lost, dup, extra, len(want)
}

// classRate is the achieved rate of a class at the provider, from its first
// to its last accepted message.
func classRate(recs []simRecord, class string) (float64, int) {
	ts := elapsed(recs, class)
	if len(ts) < 2 {
		return 0, len(ts)
	}
	return float64(len(ts)-1) / (ts[len(ts)-1] - ts[0]).Seconds(), len(ts)
}

// elapsed is, sorted, when the simulator accepted each record of class,
// on its monotonic clock. A class's pace is read
// from it: by the wall-clock times (At) one run gave marketing 65/s, its
// first and last sends 30.75 s apart in a test that took 30.38 s, the
// wall clock having run 2.2 s ahead inside the run (a step, or a pause of
// the virtual machine only the wall clock counted). The contract's
// windows (maxInAnyInterval) stay on the wall clock: a provider counts
// real time, which a pause of our machine does not stop, and Redis's
// clock, which paces us, is a wall clock too.
func elapsed(recs []simRecord, class string) []time.Duration {
	ts := make([]time.Duration, 0, len(recs))
	for _, r := range recs {
		if r.Class == class {
			ts = append(ts, r.Elapsed)
		}
	}
	slices.Sort(ts)
	return ts
}

// classGaps says where a class's sends lost time: the longest pauses
// between two of its consecutive sends, with their place in the run.
func classGaps(recs []simRecord, class string) string {
	ts := elapsed(recs, class)
	type gap struct {
		at int
		d  time.Duration
	}
	var gaps []gap
	for i := 1; i < len(ts); i++ {
		gaps = append(gaps, gap{i, ts[i] - ts[i-1]})
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i].d > gaps[j].d })
	out := "longest pauses between two sends:"
	for _, g := range gaps[:min(len(gaps), 5)] {
		out += fmt.Sprintf(" %v before send %d of %d (%.1f s in),", g.d.Round(time.Millisecond), g.at+1, len(ts), (ts[g.at] - ts[0]).Seconds())
	}
	return strings.TrimSuffix(out, ",")
}

// fleetCounts sums over gws the send loop's counts that say why a class
// ran under its cap: forfeited late slots, requeues by reason, loop
// errors, provider throttles and breaker refusals (non-zero series only).
func fleetCounts(t *testing.T, gws []*gwProc) string {
	t.Helper()
	sums := map[string]float64{}
	for _, gw := range gws {
		eachSample(t, gw, func(series string, v float64) {
			for _, name := range []string{"smsgw_dispatch_late_slots_total", "smsgw_dispatch_requeues_total",
				"smsgw_dispatch_loop_errors_total", "smsgw_dispatch_provider_throttles_total", "smsgw_dispatch_breaker_rejections_total"} {
				if strings.HasPrefix(series, name) && v > 0 {
					sums[series] += v
				}
			}
		})
	}
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%s %.0f", k, sums[k])
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// maxInAnyInterval counts the most records accepted within any interval of
// length d (a trailing window at every record), on the wall clock (see
// elapsed).
func maxInAnyInterval(recs []simRecord, d time.Duration) int {
	ts := make([]time.Time, 0, len(recs))
	for _, r := range recs {
		ts = append(ts, r.At)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	best, lo := 0, 0
	for hi := range ts {
		for ts[hi].Sub(ts[lo]) >= d {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

func checkContract(t *testing.T, r *campaignRun, limit int) {
	t.Helper()
	st := r.sim.Stats(t)
	recs := r.sim.Accepted(t)
	if st.Rejected429 != 0 || st.Rejected403 != 0 {
		t.Errorf("provider answered %d 429s and %d 403s; want none", st.Rejected429, st.Rejected403)
	}
	if got := maxInAnyInterval(recs, time.Second); got > limit {
		t.Errorf("provider saw %d messages within one second; contract is %d", got, limit)
	}
	if st.MaxInAny1s > limit {
		t.Errorf("simulator reports %d in its worst second; contract is %d", st.MaxInAny1s, limit)
	}
	checkExactlyOnce(t, recs, r.campaign, r.otp)
	// Marketing runs at its cap when the machine keeps up. A slot the
	// send loop reached too late is forfeited (sending then could break the
	// contract) and counted: a starved machine (other packages' tests on
	// the same cores) slows marketing without any fault of the gateway, so
	// the rate is asserted only when no slot was forfeited.
	rate, n := classRate(recs, "marketing")
	if rate < 0.97*70 {
		late := 0.0
		for _, gw := range r.gws {
			eachSample(t, gw, func(series string, v float64) {
				if series == `smsgw_dispatch_late_slots_total{class="marketing"}` {
					late += v
				}
			})
		}
		report := t.Errorf
		if late > 0 {
			report = t.Logf
		}
		report("marketing ran at %.1f/s over %d messages; want >= 97%% of its 70/s cap unless slots were forfeited late (%s; the fleet's counts: %s)",
			rate, n, classGaps(recs, "marketing"), fleetCounts(t, r.gws))
	}
	// OTP latency is reported, not asserted: on a shared machine it says
	// more about the neighbours than about us (figures: docs/scale.md section 7).
	lat := st.Latency["otp"]
	if lat.Count != len(r.otp) {
		t.Errorf("the provider measured %d OTP latencies for %d OTP sent", lat.Count, len(r.otp))
	}
	// Every send is counted once in the fleet's queue-to-provider
	// histograms, and every message reads sent.
	var counted float64
	for _, gw := range r.gws {
		eachSample(t, gw, func(series string, v float64) {
			if strings.HasPrefix(series, "smsgw_dispatch_queue_to_provider_seconds_count{") {
				counted += v
			}
		})
	}
	if n := len(r.campaign) + len(r.otp); int(counted) != n {
		t.Errorf("the gateways' queue_to_provider histograms count %v sends, want %d", counted, n)
	}
	checkStatusesAs(t, r.gws[0], keyMarketing, r.campaign, "sent")
	checkStatusesAs(t, r.gws[len(r.gws)-1], keyOTP, r.otp, "sent")
	t.Logf("campaign %d + OTP %d: 429s %d, max in any 1 s %d (limit %d), marketing %.2f/s, OTP p50 %.1f ms p99 %.1f ms max %.1f ms",
		len(r.campaign), len(r.otp), st.Rejected429, st.MaxInAny1s, limit, rate, lat.P50, lat.P99, lat.Max)
}

// campaignSize is the marketing campaign of the contract runs: 8.5 s at
// marketing's 70/s cap, eight or more of the provider's windows, with an
// OTP trickle of about 55 through it.
const campaignSize = 600

// Three gateway processes share Redis; the provider counts any trailing
// second. Nothing may be rejected, lost or duplicated and marketing runs at
// its cap; the OTP latency through the campaign is logged.
func TestThreeReplicasSlidingWindow(t *testing.T) {
	skipShort(t)
	sim := startSim(t, "--limit", "100", "--window", "sliding")
	acct := redistest.Prefix(t)
	gws := startFleet(t, 3, gwOptions{RedisAddr: redistest.Addr(t), Account: acct, SimURL: sim.URL})
	r := runCampaign(t, sim, gws, campaignSize)
	checkContract(t, r, 100)
}

// Five processes; the provider counts fixed one-second windows starting
// 0.37 s past each second.
func TestFiveReplicasFixedWindowOffset(t *testing.T) {
	skipShort(t)
	sim := startSim(t, "--limit", "100", "--window", "fixed", "--offset", "0.37")
	acct := redistest.Prefix(t)
	gws := startFleet(t, 5, gwOptions{RedisAddr: redistest.Addr(t), Account: acct, SimURL: sim.URL})
	r := runCampaign(t, sim, gws, campaignSize)
	checkContract(t, r, 100)
}
