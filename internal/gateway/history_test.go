package gateway

import (
	"net/http"
	"testing"
	"time"

	"smsgw/internal/opsview"
	"smsgw/internal/provider/sim"
)

// historyPatience: a count shows once the recorder has run (every 5 s)
// and its step has ended (5 s more), on a busy machine.
const historyPatience = 45 * time.Second

func (h *harness) history() opsview.HistoryResponse {
	h.t.Helper()
	r := h.get("/v1/admin/history", keyAdmin)
	wantStatus(h.t, r, http.StatusOK)
	var out opsview.HistoryResponse
	r.json(h.t, &out)
	return out
}

func sum(v []int64) int64 {
	var n int64
	for _, x := range v {
		n += x
	}
	return n
}

func waitHistory(t *testing.T, h *harness, what string, cond func(opsview.HistoryResponse) bool) opsview.HistoryResponse {
	t.Helper()
	deadline := time.Now().Add(historyPatience)
	for {
		hr := h.history()
		if cond(hr) {
			return hr
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s the history does not show %s: sent %v accepted %v throttled %d drain %+v",
				historyPatience, what, map[string]int64{"otp": sum(hr.Sent["otp"]), "transactional": sum(hr.Sent["transactional"])},
				sum(hr.Accepted["transactional"]), sum(hr.Throttled), hr.Drain)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestAdminHistory: the history answer (checked against the spec) starts
// empty and follows real traffic: queued and fast-path sends, queued
// messages, a provider 429 and the queue depth.
func TestAdminHistory(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, nil)
			wantStatus(t, h.get("/v1/admin/history", ""), http.StatusUnauthorized)
			hr := h.history()
			wantScope := map[mode]string{embeddedMode: opsview.ScopeProcess, redisMode: opsview.ScopeShared}[m]
			if hr.Scope != wantScope || hr.StepSeconds != 5 || len(hr.Throttled) != 180 ||
				!hr.End.Equal(hr.Start.Add(15*time.Minute)) || time.Since(hr.End) > time.Minute || time.Since(hr.End) < 0 {
				t.Fatalf("scope %q, step %gs, %d steps, %s..%s: want %s, 5s, 180 steps ending now",
					hr.Scope, hr.StepSeconds, len(hr.Throttled), hr.Start, hr.End, wantScope)
			}
			if l := hr.Limits; l.ContractRPS != 100 || l.TargetRPS != 90 || len(l.ClassMaxRPS) != 1 || l.ClassMaxRPS["marketing"] != 70 {
				t.Fatalf("limits %+v", l)
			}
			for _, c := range []string{"otp", "transactional", "marketing"} {
				if len(hr.Sent[c]) != 180 || len(hr.Accepted[c]) != 180 || len(hr.Queued[c]) != 180 || sum(hr.Sent[c]) != 0 {
					t.Fatalf("class %s: %d/%d/%d steps, %d sent", c, len(hr.Sent[c]), len(hr.Accepted[c]), len(hr.Queued[c]), sum(hr.Sent[c]))
				}
			}

			for range 3 {
				wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
			}
			for range 2 {
				wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
			}
			// The queued sends are done before the provider throttles, so
			// the one 429 is the OTP's.
			eventually(t, "the transactional sends", func() bool { return h.stats().Classes["transactional"].SentTotal == 3 })
			for1s := sim.Duration(time.Second)
			if err := h.sim.Apply(sim.Control{ThrottleAllFor: &for1s}); err != nil {
				t.Fatal(err)
			}
			wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusServiceUnavailable)
			hr = waitHistory(t, h, "3 transactional and 2 OTP sent, 3 queued, one 429", func(hr opsview.HistoryResponse) bool {
				return sum(hr.Sent["transactional"]) == 3 && sum(hr.Sent["otp"]) == 2 &&
					sum(hr.Accepted["transactional"]) == 3 && sum(hr.Throttled) == 1
			})
			if sum(hr.Accepted["otp"]) != 0 || sum(hr.Sent["marketing"]) != 0 {
				t.Errorf("fast-path OTPs counted as queued (%d) or marketing sent (%d)", sum(hr.Accepted["otp"]), sum(hr.Sent["marketing"]))
			}
			var depths int
			for _, q := range hr.Queued["transactional"] {
				if q != nil {
					depths++
				}
			}
			if depths == 0 || hr.Drain == nil || hr.Drain.OverSeconds != 60 || len(hr.Drain.ByClass) != 3 {
				t.Fatalf("%d steps with a queue depth, drain %+v", depths, hr.Drain)
			}
			// Everything was sent: the backlog is empty and drains in 0 s.
			hr = waitHistory(t, h, "an empty backlog", func(hr opsview.HistoryResponse) bool {
				return hr.Drain != nil && hr.Drain.Total.Backlog == 0
			})
			if d := hr.Drain.Total.DrainSeconds; d == nil || *d != 0 {
				t.Errorf("an empty backlog drains in %v, want 0", d)
			}
		})
	}
}

// TestHistorySharedAcrossReplicas: with Redis every replica adds to the
// same steps and reads the same history, whichever replica sent; a
// replica that stops adds its last counts on the way out.
func TestHistorySharedAcrossReplicas(t *testing.T) {
	t.Parallel()
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, redisMode, s.URL())
	a := startWith(t, cfg, s)
	cfg.Store.Path = t.TempDir()
	b := startWith(t, cfg, s)
	for range 4 {
		wantStatus(t, a.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
	}
	waitHistory(t, b, "a's 4 OTPs in b's history", func(hr opsview.HistoryResponse) bool { return sum(hr.Sent["otp"]) == 4 })
	wantStatus(t, a.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
	if err := a.app.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitHistory(t, b, "the OTP a sent just before it stopped", func(hr opsview.HistoryResponse) bool { return sum(hr.Sent["otp"]) == 5 })
}
