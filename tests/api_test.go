package tests

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"smsgw/internal/redistest"
)

// A producer retries a POST with the same Idempotency-Key against another
// replica (its first answer was lost): it gets the same id, and the provider
// receives the message once.
func TestIdempotencyKeyAcrossReplicaProcesses(t *testing.T) {
	skipShort(t)
	sim := startSim(t, "--limit", "100")
	acct := redistest.Prefix(t)
	gws := startFleet(t, 3, gwOptions{RedisAddr: redistest.Addr(t), Account: acct, SimURL: sim.URL})
	body := message{To: phone(42), Body: "Your parcel arrives today", Class: "transactional"}
	var ids []string
	for i, gw := range gws {
		r := post(t, gw.URL+"/v1/messages", keyTxn, body, "Idempotency-Key", "order-4711-shipped")
		if r.Status != http.StatusAccepted {
			t.Fatalf("replica %d: %d %s", i, r.Status, r.Body)
		}
		if replayed := r.Header.Get("Idempotent-Replayed") == "true"; replayed != (i > 0) {
			t.Errorf("replica %d: Idempotent-Replayed=%v", i, replayed)
		}
		ids = append(ids, r.ID)
	}
	if ids[0] == "" || ids[0] != ids[1] || ids[1] != ids[2] {
		t.Fatalf("ids differ across replicas: %v", ids)
	}
	other := body
	other.Body = "Something else"
	if r := post(t, gws[2].URL+"/v1/messages", keyTxn, other, "Idempotency-Key", "order-4711-shipped"); r.Status != http.StatusUnprocessableEntity {
		t.Errorf("same key, other body: %d, want 422", r.Status)
	}
	sim.WaitAccepted(t, 1, 20*time.Second)
	time.Sleep(time.Second)
	checkExactlyOnce(t, sim.Accepted(t), ids[:1])
}

type otpAnswer struct {
	ID       string  `json:"id"`
	Status   string  `json:"status"`
	Provider string  `json:"provider_message_id"`
	WaitedMS float64 `json:"waited_ms"`
}

// otpFastPath calls POST /v1/otp n times, every gap, round-robin over the
// gateways, and returns the ids of the 200 answers and the count of others.
func otpFastPath(t *testing.T, gws []*gwProc, n int, gap time.Duration) (ok []string, refused int) {
	t.Helper()
	ok, refused, _ = otpFastPathTimed(t, gws, n, gap)
	return ok, refused
}

// otpFastPathTimed is otpFastPath that also returns each sent OTP's steps
// (its answer's Server-Timing) by id.
func otpFastPathTimed(t *testing.T, gws []*gwProc, n int, gap time.Duration) (ok []string, refused int, steps otpSteps) {
	t.Helper()
	steps = otpSteps{}
	for i := 0; i < n; i++ {
		gw := gws[i%len(gws)]
		r := post(t, gw.URL+"/v1/otp", keyOTP, map[string]string{"to": phone(700000 + i), "body": "Your code is " + strconv.Itoa(100000+i)})
		switch r.Status {
		case http.StatusOK:
			var a otpAnswer
			if err := json.Unmarshal(r.Body, &a); err != nil || a.Status != "sent" || a.Provider == "" {
				t.Fatalf("otp 200 answer: %s", r.Body)
			}
			ok = append(ok, a.ID)
			steps.add(a.ID, r.Header)
		case http.StatusServiceUnavailable:
			if r.Header.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After")
			}
			refused++
		default:
			t.Fatalf("otp: %d %s", r.Status, r.Body)
		}
		time.Sleep(gap)
	}
	return ok, refused, steps
}

// POST /v1/otp while a campaign saturates marketing on three replicas:
// none refused, the contract kept; the arrival-to-provider latency logged.
func TestOTPFastPathDuringCampaign(t *testing.T) {
	skipShort(t)
	sim := startSim(t, "--limit", "100")
	acct := redistest.Prefix(t)
	gws := startFleet(t, 3, gwOptions{RedisAddr: redistest.Addr(t), Account: acct, SimURL: sim.URL})
	// 11 s at marketing's 70/s cap: still running when the 100 OTPs,
	// 80 ms apart, are through.
	campaign := postCampaign(t, gws, 800)
	sim.WaitAccepted(t, 100, 30*time.Second) // the campaign is running
	ok, refused, steps := otpFastPathTimed(t, gws, 100, 80*time.Millisecond)
	st := sim.Stats(t)
	steps.log(t, "OTP fast path during a campaign, 3 replicas", sim.Accepted(t))
	if refused > 0 {
		t.Errorf("%d of 100 OTP refused during the campaign", refused)
	}
	// The latency is reported, not asserted (a shared machine's noise).
	lat := st.Latency["otp"]
	if lat.Count < len(ok) {
		t.Errorf("the provider measured %d OTP latencies for %d sent", lat.Count, len(ok))
	}
	if st.Rejected429 != 0 || st.MaxInAny1s > 100 {
		t.Errorf("429s %d, max in any 1 s %d", st.Rejected429, st.MaxInAny1s)
	}
	st = sim.WaitAccepted(t, len(campaign)+len(ok), 60*time.Second)
	checkExactlyOnce(t, sim.Accepted(t), campaign, ok)
	t.Logf("OTP fast path during a campaign: %d sent, p50 %.1f ms, p99 %.1f ms, max %.1f ms; 429s %d", len(ok), lat.P50, lat.P99, lat.Max, st.Rejected429)
}

// With Redis stopped, POST /v1/otp still sends, through each process's
// fallback limiter (target_rps / max_senders).
func TestOTPWithRedisDown(t *testing.T) {
	skipShort(t)
	rs := redistest.StartServer(t, redistest.ServerOptions{AppendOnly: true})
	sim := startSim(t, "--limit", "100")
	acct := redistest.Prefix(t)
	gws := startFleet(t, 2, gwOptions{RedisAddr: rs.Addr, Account: acct, SimURL: sim.URL})
	rs.Kill()
	// The fallback rate is 90/23 ≈ 3.9/s per process with a burst of 1, so
	// space the requests to what two processes may send.
	ok, refused := otpFastPath(t, gws, 12, 300*time.Millisecond)
	if len(ok) < 10 {
		t.Errorf("only %d of 12 OTP sent with Redis down (%d refused)", len(ok), refused)
	}
	recs := sim.Accepted(t)
	if n := maxInAnyInterval(recs, time.Second); n > 2*4 {
		t.Errorf("%d sends in one second from 2 processes in fallback; the fallback allows at most 4 each", n)
	}
	checkExactlyOnce(t, recs, ok)
	t.Logf("Redis down: %d OTP sent, %d refused with 503 + Retry-After", len(ok), refused)
}
