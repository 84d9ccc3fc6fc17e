package tests

// Sender lanes end to end: a provider that limits each sender as well as
// the account, as real ones do, answering a sender's overrun with a 429
// of scope "sender".

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"smsgw/internal/redistest"
)

// The provider's sender limits: Mkt1 a US long code at 1/s, Mkt2 at 40/s,
// Auth (OTP) at 30/s; and the gateway's, a tenth below each as
// docs/configuration.md says (target_rps is below contract_rps alike: a
// send's trip to the provider varies by milliseconds, and two sends a
// second apart at 1/s may arrive 999 ms apart). Mkt3 has no limit of its
// own and is throttled by the provider. The fleet is two processes
// (max_senders), so a Redis call that times out on a loaded machine sends
// a replica to half the rates, not a 23rd.
const (
	simSenders     = "Mkt1=1,Mkt2=40,Auth=30"
	gatewaySenders = "limits: {max_senders: 2, senders: {Mkt1: {max_rps: 0.9}, Mkt2: {max_rps: 36}, Auth: {max_rps: 27}}}\n"
)

// senderStats is what the simulator saw of one sender.
type senderStats struct {
	Accepted    int `json:"accepted"`
	Rejected429 int `json:"rejected_429"`
	MaxInAny1s  int `json:"max_in_any_1s"`
}

func (s *simProc) senders(t *testing.T) map[string]senderStats {
	t.Helper()
	var st struct {
		Senders map[string]senderStats `json:"senders"`
	}
	getJSON(t, s.URL+"/stats", &st)
	return st.Senders
}

// postFrom posts n messages of class from sender through the batch
// endpoint of gw and returns the accepted ids.
func postFrom(t *testing.T, gw *gwProc, key, class, from string, start, n int) []string {
	t.Helper()
	msgs := make([]map[string]string, n)
	for i := range msgs {
		msgs[i] = map[string]string{"to": phone(start + i), "body": "Sale " + strconv.Itoa(start+i), "class": class, "from": from}
	}
	r := post(t, gw.URL+"/v1/messages/batch", key, map[string]any{"messages": msgs})
	var res batchAnswer
	if err := json.Unmarshal(r.Body, &res); err != nil || len(res.Results) != n {
		t.Fatalf("batch from %s: %d %.300s", from, r.Status, r.Body)
	}
	ids := make([]string, 0, n)
	for i, x := range res.Results {
		if x.Status != http.StatusAccepted {
			t.Fatalf("batch from %s: item %d answered %d", from, i, x.Status)
		}
		ids = append(ids, x.Message.ID)
	}
	return ids
}

// TestSenderLanes: a slow sender's backlog, posted first, does not delay a
// fast sender's messages of the same class; configured senders draw no
// 429; a sender the provider throttles for seconds draws at most one 429
// per replica and holds back nobody else; every OTP is answered 200
// meanwhile; nothing is lost or sent twice. Both modes: two replicas on
// Redis, one process on the embedded store.
func TestSenderLanes(t *testing.T) {
	skipShort(t)
	for _, mode := range []string{"redis", "embedded"} {
		t.Run(mode, func(t *testing.T) {
			sim := startSim(t, "--limit", "100", "--window", "sliding", "--senders", simSenders)
			o := gwOptions{SimURL: sim.URL, Extra: gatewaySenders, Account: "senders"}
			n := 1
			if mode == "redis" {
				o.RedisAddr, o.Account, n = redistest.Addr(t), redistest.Prefix(t), 2
			}
			gws := startFleet(t, n, o)

			// The provider throttles Mkt3 for 3 s, from before its messages.
			sim.Control(t, `{"throttle_sender": {"from": "Mkt3", "for": "3s"}}`)
			var ids []string
			slow := postFrom(t, gws[0], keyMarketing, "marketing", "Mkt1", 0, 6) // 6.6 s of backlog at 0.9/s, ahead in line
			ids = append(ids, slow...)
			ids = append(ids, postFrom(t, gws[0], keyTxn, "transactional", "Mkt3", 1000, 30)...)
			posted := time.Now()
			fast := postFrom(t, gws[n-1], keyMarketing, "marketing", "Mkt2", 2000, 60) // under 2 s at 36/s
			ids = append(ids, fast...)

			// OTP at 5/s from Auth meanwhile, every one answered 200.
			var wg sync.WaitGroup
			var otps []string
			var refused int
			wg.Go(func() {
				for i := range 20 {
					r := post(t, gws[i%n].URL+"/v1/otp", keyOTP, map[string]string{"to": phone(3000 + i), "body": "Your code is " + strconv.Itoa(100000+i), "from": "Auth"})
					if r.Status != http.StatusOK {
						refused++
						t.Logf("otp %d: %d %s", i, r.Status, r.Body)
					} else {
						otps = append(otps, r.ID)
					}
					time.Sleep(200 * time.Millisecond)
				}
			})

			// Mkt2's 60 go at their own pace, while Mkt1's backlog is still
			// being sent one a second: held behind it, they would take 6 s.
			deadline := time.Now().Add(15 * time.Second)
			for sim.senders(t)["Mkt2"].Accepted < len(fast) {
				if time.Now().After(deadline) {
					t.Fatalf("Mkt2: %d of %d sent within 15 s", sim.senders(t)["Mkt2"].Accepted, len(fast))
				}
				time.Sleep(50 * time.Millisecond)
			}
			fastDone := time.Since(posted)
			slowSent := sim.senders(t)["Mkt1"].Accepted
			wg.Wait()
			st := sim.WaitAccepted(t, len(ids)+len(otps), 30*time.Second)
			senders := sim.senders(t)
			t.Logf("%s, %d replicas: Mkt2's 60 sent %.1f s after posting, Mkt1 had sent %d of %d then; per sender %+v; 429s in all %d",
				mode, n, fastDone.Seconds(), slowSent, len(slow), senders, st.Rejected429)
			if slowSent >= len(slow) {
				t.Errorf("Mkt2 took %s, Mkt1 had sent %d of %d: the slow sender's backlog held the fast one", fastDone, slowSent, len(slow))
			}
			for _, s := range []string{"Mkt1", "Mkt2", "Auth"} {
				if senders[s].Rejected429 != 0 {
					t.Errorf("%s, whose limit is configured, drew %d 429s", s, senders[s].Rejected429)
				}
			}
			if got := senders["Mkt3"].Rejected429; got < 1 || got > n {
				t.Errorf("the throttled sender drew %d 429s, want 1 to %d (one per replica at most)", got, n)
			}
			if st.Rejected429 != senders["Mkt3"].Rejected429 {
				t.Errorf("%d 429s in all, %d of them Mkt3's: the account drew some", st.Rejected429, senders["Mkt3"].Rejected429)
			}
			if refused > 0 || len(otps) != 20 {
				t.Errorf("%d of 20 OTPs refused while Mkt3 was throttled", refused)
			}
			checkExactlyOnce(t, sim.Accepted(t), ids, otps)
		})
	}
}
