package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"smsgw/internal/provider/sim"
	"smsgw/internal/sms"
)

func (h *harness) stats() statsResponse {
	h.t.Helper()
	r := h.get("/v1/admin/stats", keyAdmin)
	wantStatus(h.t, r, http.StatusOK)
	var st statsResponse
	r.json(h.t, &st)
	return st
}

// TestStatsFiguresFollowTraffic: every new figure of the stats answer
// starts at zero and moves with real traffic through the simulator: sends,
// permanent failures, fast-path OTPs, a provider 429 and the 503 it causes.
func TestStatsFiguresFollowTraffic(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, func(c *Config) { c.Dispatch.MaxAttempts = 1 })
			st := h.stats()
			for c, cs := range st.Classes {
				if cs.SentTotal+cs.FailedTotal+cs.ExpiredTotal+cs.DeadTotal != 0 {
					t.Errorf("class %s starts at %+v", c, cs)
				}
			}
			wantScope := map[mode]string{embeddedMode: scopeProcess, redisMode: scopeShared}[m]
			wantLimiter := map[mode]string{embeddedMode: "local", redisMode: "shared"}[m]
			pv := st.Provider
			if st.Counters.Scope != wantScope || pv.RateScope != wantScope || pv.TargetRPS != 90 || pv.ContractRPS != 100 ||
				pv.SuspendAfter != 300 || pv.WindowSeconds != 600 || pv.GuardActivateAt != 150 || pv.GuardActive ||
				pv.ThrottledTotal != 0 || pv.ThrottledInWindow != 0 || pv.Name == "" {
				t.Errorf("fresh counters %+v provider %+v", st.Counters, pv)
			}
			if st.OTP.LatencyP99MS != nil || st.OTP.LatencySamples != 0 || st.OTP.UnavailableTotal != 0 {
				t.Errorf("fresh otp %+v", st.OTP)
			}
			rep := st.Replica
			if rep.Owner == "" || rep.Mode != string(m) || rep.LimiterMode != wantLimiter || rep.UptimeSeconds < 0 ||
				time.Since(rep.StartedAt) > time.Minute || time.Since(st.Counters.Since) > time.Minute {
				t.Errorf("replica %+v counters %+v", rep, st.Counters)
			}

			// Queued sends: 3 transactional sent; then, the provider
			// failing, 1 marketing dead after its one attempt.
			for range 3 {
				wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
			}
			// The fast path: two OTPs sent now.
			for range 2 {
				wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
			}
			eventually(t, "the sends counted", func() bool { return h.stats().Classes["transactional"].SentTotal == 3 })
			fail := 1.0
			if err := h.sim.Apply(sim.Control{FailRate: &fail}); err != nil {
				t.Fatal(err)
			}
			wantStatus(t, h.post("/v1/messages", keyNotify, msg("marketing")), http.StatusAccepted)
			// One answer reads the queue before the counters: wait until
			// both show the dead letter.
			eventually(t, "the dead letter counted", func() bool {
				st = h.stats()
				return st.Classes["marketing"].DeadTotal == 1 && st.Classes["marketing"].Dead == 1
			})
			if err := h.sim.Apply(sim.Control{Clear: true}); err != nil {
				t.Fatal(err)
			}
			if c := st.Classes["marketing"]; c.SentTotal != 0 || c.Dead != 1 || c.FailedTotal != 0 {
				t.Errorf("marketing %+v, want 1 dead letter and nothing sent", c)
			}
			if c := st.Classes["otp"]; c.SentTotal != 2 || c.FailedTotal != 0 {
				t.Errorf("otp %+v, want 2 sent (fast path)", c)
			}
			if st.OTP.LatencySamples != 2 || st.OTP.LatencyP50MS == nil || st.OTP.LatencyP99MS == nil ||
				*st.OTP.LatencyP99MS < *st.OTP.LatencyP50MS || *st.OTP.LatencyP99MS <= 0 || *st.OTP.LatencyP99MS > 1000 {
				t.Errorf("otp latency %+v", st.OTP)
			}
			eventually(t, "a send rate", func() bool { return h.stats().Provider.SentPerSecond > 0 })

			// The provider throttles: the OTP answers 503, the 429 is
			// counted, and the guard's window holds it.
			for1s := sim.Duration(time.Second)
			if err := h.sim.Apply(sim.Control{ThrottleAllFor: &for1s}); err != nil {
				t.Fatal(err)
			}
			wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusServiceUnavailable)
			st = h.stats()
			if st.Provider.ThrottledTotal != 1 || st.Provider.ThrottledInWindow != 1 || st.OTP.UnavailableTotal != 1 {
				t.Errorf("after one 429: provider %+v otp %+v", st.Provider, st.OTP)
			}
		})
	}
}

// TestSharedCountersAcrossReplicas: with Redis every replica reports the
// account's totals, whichever replica sent; and a stopped replica's last
// sends are not lost.
func TestSharedCountersAcrossReplicas(t *testing.T) {
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, redisMode, s.URL())
	a := startWith(t, cfg, s)
	cfg.Store.Path = t.TempDir()
	b := startWith(t, cfg, s)
	wantStatus(t, a.post("/v1/admin/pause", keyAdmin, nil), http.StatusOK)
	eventually(t, "b to see the pause", func() bool { return b.stats().Pause.Paused })
	// Sent by a alone, on the fast path (b's dispatcher never sees them).
	wantStatus(t, a.post("/v1/admin/resume", keyAdmin, nil), http.StatusOK)
	eventually(t, "a to see the resume", func() bool { return !a.stats().Pause.Paused })
	time.Sleep(2 * pausedRetry)
	for range 4 {
		wantStatus(t, a.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
	}
	eventually(t, "replica b to report a's sends", func() bool {
		st := b.stats()
		return st.Classes["otp"].SentTotal == 4 && st.Counters.Scope == scopeShared
	})
	if st := b.stats(); st.OTP.LatencySamples != 0 {
		t.Errorf("b reports %d OTP latencies; latency is per replica and b sent none", st.OTP.LatencySamples)
	}
	if st := a.stats(); st.Classes["otp"].SentTotal != 4 || st.Replica.Owner == b.stats().Replica.Owner {
		t.Errorf("a reports %d otp sent; owners %q, %q", st.Classes["otp"].SentTotal, st.Replica.Owner, b.stats().Replica.Owner)
	}
	// One more from a, then a stops at once: its final flush carries it.
	wantStatus(t, a.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
	if err := a.app.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := b.stats().Classes["otp"].SentTotal; got != 5 {
		t.Errorf("after a stopped b reports %d otp sent, want 5", got)
	}
}

func TestAdminGetMessage(t *testing.T) {
	h := start(t, embeddedMode, nil)
	r := h.post("/v1/messages", keyNotify, msg("transactional", "reference", "order-9"))
	wantStatus(t, r, http.StatusAccepted)
	var a acceptedMessage
	r.json(t, &a)
	var v adminMessage
	eventually(t, "the message sent", func() bool {
		g := h.get("/v1/admin/messages/"+a.ID, keyAdmin)
		wantStatus(t, g, http.StatusOK)
		g.json(t, &v)
		return v.Status == sms.StatusSent
	})
	if v.ID != a.ID || v.Producer != "notify" || v.Reference != "order-9" || v.To != sms.MaskPhone("+819012345678") ||
		!strings.Contains(v.To, "*") || v.ProviderMessageID == "" {
		t.Errorf("admin view %+v", v)
	}
	wantStatus(t, h.get("/v1/admin/messages/"+a.ID, keyNotify), http.StatusForbidden)
	wantStatus(t, h.get("/v1/admin/messages/"+a.ID, ""), http.StatusUnauthorized)
	wantStatus(t, h.get("/v1/admin/messages/"+sms.NewID(time.Now()), keyAdmin), http.StatusNotFound)
	wantStatus(t, h.get("/v1/admin/messages/not-an-id", keyAdmin), http.StatusNotFound)
}

func TestLatencyWindowQuantiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		add      []int // ms
		size     int
		p50, p99 time.Duration
		n        int
	}{
		{"empty", nil, 10, 0, 0, 0},
		{"one", []int{7}, 10, 7 * time.Millisecond, 7 * time.Millisecond, 1},
		{"1..100", seq(1, 100), 100, 50 * time.Millisecond, 99 * time.Millisecond, 100},
		{"only the last window counts", append(seq(1000, 1100), seq(1, 100)...), 100, 50 * time.Millisecond, 99 * time.Millisecond, 100},
		{"negative clamps to 0", []int{-5}, 10, 0, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newLatencyWindow(tc.size)
			for _, v := range tc.add {
				w.add(time.Duration(v) * time.Millisecond)
			}
			q, n := w.quantiles(0.5, 0.99)
			if n != tc.n {
				t.Fatalf("n %d, want %d", n, tc.n)
			}
			if n > 0 && (q[0] != tc.p50 || q[1] != tc.p99) {
				t.Errorf("p50 %v p99 %v, want %v %v", q[0], q[1], tc.p50, tc.p99)
			}
		})
	}
}

func seq(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// TestCountersKeyHasTheAccountTag: the shared hash lives in the account's
// Cluster slot.
func TestCountersKeyHasTheAccountTag(t *testing.T) {
	t.Parallel()
	if got, want := newAPIKeys("acct").counters(), "{smsgw:acct}:"; !strings.HasPrefix(got, want) {
		t.Errorf("counters key %q lacks the prefix %q", got, want)
	}
	var tt totals
	if n := len(tt.fields()); n != 4*len(sms.Classes)+2 {
		t.Errorf("%d counter fields", n)
	}
}
