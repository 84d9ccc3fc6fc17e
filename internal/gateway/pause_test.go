package gateway

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/opsview"
	"smsgw/internal/provider/sim"
)

// classHeld reports whether h's stats show a pause of class.
func classHeld(t testing.TB, h *harness, class string) bool {
	var st opsview.StatsResponse
	h.get("/v1/admin/stats", keyAdmin).json(t, &st)
	return slices.ContainsFunc(st.Pause.Scopes, func(s admission.ScopeState) bool { return s.Class == class })
}

// postIDs posts n messages of class through h and returns their ids.
func postIDs(t testing.TB, h *harness, class string, n int) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for range n {
		r := h.post("/v1/messages", keyNotify, msg(class))
		wantStatus(t, r, http.StatusAccepted)
		var v struct{ ID string }
		r.json(t, &v)
		ids = append(ids, v.ID)
	}
	return ids
}

// pauseReplicas starts one replica (embedded) or two sharing Redis (redis)
// on one simulator; edit may change the config first.
func pauseReplicas(t *testing.T, m mode, edit func(*config.Config)) (*sim.Sim, []*harness) {
	t.Helper()
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, m, s.URL())
	if edit != nil {
		edit(&cfg)
	}
	hs := []*harness{startWith(t, cfg, s)}
	if m == redisMode {
		cfg.Store.Path = t.TempDir()
		hs = append(hs, startWith(t, cfg, s))
	}
	return s, hs
}

// waitSent waits until the simulator accepted every one of ids.
func waitSent(t *testing.T, s *sim.Sim, what string, ids []string) {
	t.Helper()
	eventually(t, what, func() bool {
		sent := sentRefs(s)
		return !slices.ContainsFunc(ids, func(id string) bool { return sent[id] == 0 })
	})
}

// wantUnsent fails when the simulator accepted any of ids.
func wantUnsent(t *testing.T, s *sim.Sim, why string, ids []string) {
	t.Helper()
	sent := sentRefs(s)
	for _, id := range ids {
		if sent[id] > 0 {
			t.Fatalf("%s was sent %s", id, why)
		}
	}
}

// wantSentOnce fails when the simulator accepted a message more than once.
func wantSentOnce(t *testing.T, s *sim.Sim) {
	t.Helper()
	for id, n := range sentRefs(s) {
		if n != 1 {
			t.Errorf("message %s sent %d times", id, n)
		}
	}
}

// TestClassPause: marketing paused by class (on one replica, with Redis
// seen by both) holds marketing in the queue while transactional and OTP
// flow: the simulator receives no marketing, POST /v1/otp answers 200.
// After resume (on the other replica), every marketing message is sent
// exactly once. Embedded: one replica; Redis: two.
func TestClassPause(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			s, hs := pauseReplicas(t, m, nil)
			a, last := hs[0], hs[len(hs)-1]

			r := a.post("/v1/admin/pause", keyAdmin, map[string]any{"class": "bulk"})
			wantProblem(t, r, http.StatusBadRequest, httpapi.KindInvalid, "class")
			wantStatus(t, a.post("/v1/admin/pause", keyAdmin, map[string]any{"class": "marketing", "reason": "campaign review"}), http.StatusOK)
			for _, h := range hs {
				eventually(t, "every replica to see the marketing pause", func() bool { return classHeld(t, h, "marketing") })
				if st := h.stats(); st.Pause.Paused {
					t.Fatal("a class pause shows as a pause of everything")
				}
			}

			var marketing, transactional []string
			for _, h := range hs {
				marketing = append(marketing, postIDs(t, h, "marketing", 10)...)
			}
			for _, h := range hs {
				transactional = append(transactional, postIDs(t, h, "transactional", 5)...)
			}
			for _, h := range hs {
				wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
			}
			waitSent(t, s, "every transactional message to be sent", transactional)
			wantUnsent(t, s, "during its class's pause", marketing)
			if q := last.stats().Classes["marketing"]; q.Ready != int64(len(marketing)) {
				t.Fatalf("marketing ready %d during the pause, want %d", q.Ready, len(marketing))
			}

			wantStatus(t, last.post("/v1/admin/resume", keyAdmin, map[string]any{"class": "marketing"}), http.StatusOK)
			waitSent(t, s, "every marketing message to be sent after resume", marketing)
			wantSentOnce(t, s)
			for _, h := range hs {
				eventually(t, "every replica to see the resume", func() bool { return !classHeld(t, h, "marketing") })
			}
		})
	}
}

// TestClassPauseOTP: POST /v1/otp answers 503 only while a pause covers
// OTP: a pause of class otp does, one of marketing does not.
func TestClassPauseOTP(t *testing.T) {
	h := start(t, embeddedMode, nil)
	wantStatus(t, h.post("/v1/admin/pause", keyAdmin, map[string]any{"class": "otp"}), http.StatusOK)
	r := h.post("/v1/otp", keyLogin, otpBody("deadline_ms", 100))
	wantStatus(t, r, http.StatusServiceUnavailable)
	if r.header.Get("Retry-After") == "" {
		t.Error("the OTP 503 during a class pause has no Retry-After")
	}
	wantStatus(t, h.post("/v1/admin/resume", keyAdmin, map[string]any{"class": "otp"}), http.StatusOK)
	wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
	wantProblem(t, h.post("/v1/admin/resume", keyAdmin, map[string]any{"class": ""}), http.StatusBadRequest, httpapi.KindInvalid, "class")
}

const keyBatch = "batch-key-0123456789ab" // marketing; added by TestProducerPause

// TestProducerPause: producer "batch" paused (on one replica, with Redis
// seen by both) has its messages set aside while another producer's
// marketing and transactional, and OTP, flow; the simulator receives none
// of batch's. After resume (on the other replica) every one of them is
// sent exactly once. A pause of the OTP's producer makes POST /v1/otp
// answer 503. Embedded: one replica; Redis: two.
func TestProducerPause(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			s, hs := pauseReplicas(t, m, func(cfg *config.Config) {
				cfg.Producers = append(cfg.Producers, config.Producer{Name: "batch", Key: keyBatch, Classes: []string{"marketing"},
					Rate: 5000, Burst: 5000})
			})
			a, last := hs[0], hs[len(hs)-1]

			wantProblem(t, a.post("/v1/admin/pause", keyAdmin, map[string]any{"producer": "nobody"}),
				http.StatusBadRequest, httpapi.KindInvalid, "producer")
			wantProblem(t, a.post("/v1/admin/pause", keyAdmin, map[string]any{"producer": "batch", "class": "marketing"}),
				http.StatusBadRequest, httpapi.KindInvalid, "producer")
			wantStatus(t, a.post("/v1/admin/pause", keyAdmin, map[string]any{"producer": "batch"}), http.StatusOK)
			held := func(h *harness) bool {
				var st opsview.StatsResponse
				h.get("/v1/admin/stats", keyAdmin).json(t, &st)
				return slices.ContainsFunc(st.Pause.Scopes, func(s admission.ScopeState) bool { return s.Producer == "batch" })
			}
			for _, h := range hs {
				eventually(t, "every replica to see the producer pause", func() bool { return held(h) })
			}

			var batch, others []string
			for _, h := range hs {
				for range 10 {
					r := h.post("/v1/messages", keyBatch, msg("marketing"))
					wantStatus(t, r, http.StatusAccepted)
					var v struct{ ID string }
					r.json(t, &v)
					batch = append(batch, v.ID)
				}
			}
			for _, h := range hs {
				others = append(others, postIDs(t, h, "marketing", 5)...)
				others = append(others, postIDs(t, h, "transactional", 5)...)
				wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
			}
			waitSent(t, s, "every other producer's message to be sent", others)
			wantUnsent(t, s, "during its producer's pause", batch)
			if q := last.stats().Classes["marketing"]; q.Ready != int64(len(batch)) {
				t.Fatalf("marketing ready %d during the pause, want batch's %d", q.Ready, len(batch))
			}

			wantStatus(t, last.post("/v1/admin/resume", keyAdmin, map[string]any{"producer": "batch"}), http.StatusOK)
			waitSent(t, s, "every batch message to be sent after resume", batch)
			wantSentOnce(t, s)

			wantStatus(t, a.post("/v1/admin/pause", keyAdmin, map[string]any{"producer": "login"}), http.StatusOK)
			eventually(t, "the last replica to answer OTP 503 for its paused producer", func() bool {
				return last.post("/v1/otp", keyLogin, otpBody("deadline_ms", 100)).status == http.StatusServiceUnavailable
			})
			wantStatus(t, a.post("/v1/admin/resume", keyAdmin, map[string]any{"producer": "login"}), http.StatusOK)
		})
	}
}

// TestProducerPauseRunsOut: a timed producer pause that runs out (no
// resume) puts its producer's messages back in line: each is sent once,
// none before the pause's end.
func TestProducerPauseRunsOut(t *testing.T) {
	s, hs := pauseReplicas(t, embeddedMode, nil)
	h := hs[0]
	r := h.post("/v1/admin/pause", keyAdmin, map[string]any{"producer": "notify", "duration_seconds": 1})
	wantStatus(t, r, http.StatusOK)
	var ps admission.PauseState
	r.json(t, &ps)
	if len(ps.Scopes) != 1 || ps.Scopes[0].Until == nil {
		t.Fatalf("timed producer pause answered %+v", ps)
	}
	until := *ps.Scopes[0].Until
	ids := postIDs(t, h, "marketing", 5)
	waitSent(t, s, "every message to be sent after the pause ran out", ids)
	for _, rec := range s.Accepted() {
		if slices.Contains(ids, rec.Reference) && rec.At.Before(until) {
			t.Errorf("%s sent at %s, before the pause's end %s", rec.Reference, rec.At, until)
		}
	}
	wantSentOnce(t, s)
}

// TestPauseReasonNoNumbers: an operator pause's reason is logged, shown in
// the stats and on the dashboard, so like a suppression's it may not hold
// a phone number (a run of more than 5 digits): 400 naming reason, and the
// gateway is not paused. A reason with a ticket number of 5 digits passes.
func TestPauseReasonNoNumbers(t *testing.T) {
	h := start(t, embeddedMode, nil)
	r := h.post("/v1/admin/pause", keyAdmin, map[string]any{"reason": "call +819012345679 re incident"})
	wantProblem(t, r, http.StatusBadRequest, httpapi.KindInvalid, "reason")
	wantStatus(t, h.post("/v1/admin/pause", keyAdmin, map[string]any{"reason": strings.Repeat("x", 201)}), http.StatusBadRequest)
	if st := h.stats(); st.Pause.Paused {
		t.Fatal("a refused pause paused the gateway")
	}
	wantStatus(t, h.post("/v1/admin/pause", keyAdmin, map[string]any{"reason": "INC-12345 carrier outage"}), http.StatusOK)
	if strings.Contains(h.logs.String(), "9012345679") {
		t.Error("the refused reason's number reached the log")
	}
}
