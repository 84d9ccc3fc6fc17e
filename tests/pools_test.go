package tests

// Sender pools end to end: requests without a from are given their
// producer's pool sender for their class at admission.

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"smsgw/internal/redistest"
	"smsgw/internal/testclient"
)

// TestSenderPools: a campaign of 120 marketing messages without from,
// from a producer whose marketing pool is [Mkt1 at 3/s, Mkt2 at 40/s], is
// spread in proportion to the rates and sent faster than Mkt2 alone could
// send it (the gateway's sender limits have a burst of 2, so that a take
// a few milliseconds late does not lose a slot); a recipient messaged again (through the other replica with
// Redis) keeps its sender, and the status answer shows it; an OTP without
// from goes out from the OTP pool. Both modes.
func TestSenderPools(t *testing.T) {
	skipShort(t)
	const (
		n          = 120
		rate1      = 3.0
		rate2      = 40.0
		aloneFloor = (n - 2) / rate2 // Mkt2 alone, burst 2: two at once, then one every 1/40 s
	)
	for _, mode := range []string{"redis", "embedded"} {
		t.Run(mode, func(t *testing.T) {
			// The provider's limits lie above the gateway's: pacing is the gateway's.
			sim := startSim(t, "--limit", "100", "--window", "sliding", "--senders", "Mkt1=6,Mkt2=50,Auth1=30,Auth2=30")
			o := gwOptions{SimURL: sim.URL, Account: "pools",
				Extra:         "limits: {max_senders: 2, senders: {Mkt1: {max_rps: 3, burst: 2}, Mkt2: {max_rps: 40, burst: 2}, Auth1: {max_rps: 20}, Auth2: {max_rps: 20}}}\n",
				CampaignExtra: ", senders: [Mkt1, Mkt2], sender_pools: {marketing: [Mkt1, Mkt2]}",
				LoginExtra:    ", sender_pools: {otp: [Auth1, Auth2]}"}
			replicas := 1
			if mode == "redis" {
				o.RedisAddr, o.Account, replicas = redistest.Addr(t), redistest.Prefix(t), 2
			}
			gws := startFleet(t, replicas, o)

			ids := postFrom(t, gws[0], keyMarketing, "marketing", "", 0, n)
			sim.WaitAccepted(t, n, 20*time.Second)
			from := map[string]string{} // message id → sender
			count := map[string]int{}
			var first, last time.Duration
			spans := map[string][2]time.Duration{}
			for _, r := range sim.Accepted(t) {
				sp := spans[r.From]
				if sp[0] == 0 || r.Elapsed < sp[0] {
					sp[0] = r.Elapsed
				}
				sp[1] = max(sp[1], r.Elapsed)
				spans[r.From] = sp

				from[r.Reference] = r.From
				count[r.From]++
				if first == 0 || r.Elapsed < first {
					first = r.Elapsed
				}
				last = max(last, r.Elapsed)
			}
			// Mkt2 alone could not go faster than its limit, nor than the
			// pace it kept here (the sender lanes put a message its sender
			// denies back until its slot, so a sender keeps under its limit
			// on a loaded machine): the campaign ends before Mkt2 could
			// have sent all n at either.
			span := (last - first).Seconds()
			kept := (spans["Mkt2"][1] - spans["Mkt2"][0]).Seconds() / float64(count["Mkt2"]-1)
			alone := max(aloneFloor, kept*(n-1))
			t.Logf("%s: %v; sent in %.2f s; Mkt2 alone: at least %.2f s at its limit, %.2f s at the pace it kept; the pool at its limits: %.2f s",
				mode, count, span, aloneFloor, alone, n/(rate1+rate2))
			if want := n * rate1 / (rate1 + rate2); float64(count["Mkt1"]) < want-3 || float64(count["Mkt1"]) > want+3 || count["Mkt1"]+count["Mkt2"] != n {
				t.Errorf("per sender %v: want Mkt1 %.1f±3 of %d, the rest Mkt2", count, want, n)
			}
			if span >= alone {
				t.Errorf("the campaign took %.2f s: no faster than Mkt2 alone (%.2f s)", span, alone)
			}
			checkExactlyOnce(t, sim.Accepted(t), ids)

			// A recipient of each sender is sent from the same sender again,
			// whichever a new recipient would get now.
			for _, sender := range []string{"Mkt1", "Mkt2"} {
				i := 0
				for from[ids[i]] != sender {
					i++
				}
				again := post(t, gws[replicas-1].URL+"/v1/messages", keyMarketing, message{To: phone(i), Body: "Sale again", Class: "marketing"})
				if again.Status != http.StatusAccepted {
					t.Fatalf("single post: %d %s", again.Status, again.Body)
				}
				if got := messageFrom(t, gws[0], keyMarketing, again.ID); got != sender {
					t.Errorf("recipient %d was sent from %s, then from %q", i, sender, got)
				}
			}

			// OTP without from: from the OTP pool, the same sender for the
			// same number.
			var otpFrom []string
			for k := range 2 {
				otp := map[string]string{"to": phone(3000), "body": "Your code is 12345" + strconv.Itoa(k)}
				r := post(t, gws[k%replicas].URL+"/v1/otp", keyOTP, otp)
				for try := 0; r.Status == http.StatusServiceUnavailable && try < 3; try++ {
					// nothing sent (a slot missed on a loaded machine): the
					// sender under test is the one it is sent from, not its latency
					t.Logf("otp: %s", r.Body)
					r = post(t, gws[k%replicas].URL+"/v1/otp", keyOTP, otp)
				}
				if r.Status != http.StatusOK {
					t.Fatalf("otp: %d %s", r.Status, r.Body)
				}
				otpFrom = append(otpFrom, messageFrom(t, gws[0], keyOTP, r.ID))
			}
			if otpFrom[0] != otpFrom[1] || !strings.HasPrefix(otpFrom[0], "Auth") {
				t.Errorf("OTPs to one number from %q, want one sender of the OTP pool", otpFrom)
			}
			metrics := testclient.Do(t, nil, testclient.New(t, http.MethodGet, gws[0].URL+"/metrics", ""))
			if !strings.Contains(string(metrics.Body), `smsgw_sender_pool_assignments_total{class="marketing",how="new",producer="campaign",sender="Mkt2"}`) {
				t.Error("no smsgw_sender_pool_assignments_total series for Mkt2")
			}
		})
	}
}

// messageFrom is the from of message id in its status answer, once the
// message is readable (an OTP's record is written after its answer
// without callbacks).
func messageFrom(t *testing.T, gw *gwProc, key, id string) string {
	t.Helper()
	var m struct {
		From string `json:"from"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := testclient.Do(t, nil, testclient.New(t, http.MethodGet, gw.URL+"/v1/messages/"+id, "", "Authorization", "Bearer "+key))
		if resp.Status == http.StatusOK {
			if err := json.Unmarshal(resp.Body, &m); err != nil {
				t.Fatalf("GET %s: %v", id, err)
			}
			return m.From
		}
		if resp.Status != http.StatusNotFound || time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %s", id, resp.Status, resp.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
