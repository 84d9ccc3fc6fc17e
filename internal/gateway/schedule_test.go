package gateway

import (
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/opsview"
	"smsgw/internal/provider/sim"
	"smsgw/internal/sms"
)

// testClock is a wall clock the test moves by hand. The stores keep their
// own (real) clocks, so tests start it at the real time.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock(t time.Time) *testClock { return &testClock{t: t} }

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func accepted(t testing.TB, r reply) httpapi.AcceptedMessage {
	t.Helper()
	wantStatus(t, r, http.StatusAccepted)
	var a httpapi.AcceptedMessage
	r.json(t, &a)
	return a
}

func batchOf(n int, item func(i int) map[string]any) map[string]any {
	items := make([]any, n)
	for i := range items {
		items[i] = item(i)
	}
	return map[string]any{"messages": items}
}

// Found by a generated client: right after a 1,000-message batch
// into an empty backlog, a marketing message with a 1 s TTL was accepted
// with estimated_send_at about now, because the depth behind the estimate
// was read before the batch and kept for 250 ms. The clock is frozen here,
// so that depth is never read again: only what this replica counts of its
// own acceptances can refuse the message.
func TestETACountsWhatThisReplicaAccepted(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		clock := newTestClock(time.Now())
		h := startClock(t, m, nil, clock.now)
		b := h.post("/v1/messages/batch", keyNotify, batchOf(httpapi.MaxBatch, func(int) map[string]any { return msg("marketing") }))
		wantStatus(t, b, http.StatusOK)
		r := h.post("/v1/messages", keyNotify, msg("marketing", "ttl_seconds", 1))
		wantStatus(t, r, http.StatusTooManyRequests)
		p := r.problem(t)
		if p["type"] != httpapi.ProblemTypeBase+"would-expire-before-send" {
			t.Fatalf("problem %v", p)
		}
		eta, _ := time.Parse(time.RFC3339Nano, p["estimated_send_at"].(string))
		// 1,000 ahead at the 70/s marketing cap.
		if wait := eta.Sub(clock.now()); math.Abs(wait.Seconds()-1000.0/70) > 1 {
			t.Errorf("estimated wait %v, want about %.1fs", wait, 1000.0/70)
		}
	})
}

// Also found by a generated client: with a 204-message backlog the refusal said
// retry_after_seconds 2 where the real wait was about 17 s. The estimate
// counted messages, the limiter paces units: 204 messages of 5 segments
// (the most limits.burst 5 lets through) are 1,020 units, 14.6 s at 70
// units/s. The backlog is stored and read
// back (the clock moves past the refresh); an operator pause keeps it
// there, and counts in the estimate.
func TestRetryHintCountsWhatTheBacklogCosts(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		clock := newTestClock(time.Now())
		h := startClock(t, m, nil, clock.now)
		wantStatus(t, h.post("/v1/admin/pause", keyAdmin, map[string]any{"duration_seconds": 60}), http.StatusOK)
		body := strings.Repeat("Spring sale. ", 58) // 754 GSM-7 characters: 5 segments
		b := h.post("/v1/messages/batch", keyNotify, batchOf(204, func(int) map[string]any { return msg("marketing", "body", body) }))
		wantStatus(t, b, http.StatusOK)
		clock.add(2 * admission.ETARefresh)

		r := h.post("/v1/messages", keyNotify, msg("marketing", "ttl_seconds", 1))
		wantStatus(t, r, http.StatusTooManyRequests)
		// Sent 60-0.5 s from now (the pause), then 1,020 units at 70/s;
		// admitted once that is under the 1 s TTL.
		want := 60 - 2*admission.ETARefresh.Seconds() + 204*5/70.0 - 1
		ra, _ := strconv.Atoi(r.header.Get("Retry-After"))
		if math.Abs(float64(ra)-want) > 1.5 {
			t.Errorf("Retry-After %d s, want about %.1f s", ra, want)
		}
		if p := r.problem(t); p["retry_after_seconds"] != float64(ra) {
			t.Errorf("retry_after_seconds %v, Retry-After %d", p["retry_after_seconds"], ra)
		}
	})
}

// A message with send_at is scheduled until then: the answer, GET and the
// estimate say so, and its TTL counts from send_at.
func TestSendAtSchedules(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		clock := newTestClock(time.Now().Truncate(time.Second))
		h := startClock(t, m, nil, clock.now)
		at := clock.now().Add(time.Hour)
		a := accepted(t, h.post("/v1/messages", keyNotify, msg("transactional", "send_at", at.Format(time.RFC3339), "ttl_seconds", 600)))
		if a.Status != sms.StatusScheduled || a.SendAt == nil || !a.SendAt.Equal(at) {
			t.Errorf("accepted %+v, want scheduled at %v", a, at)
		}
		if !a.EstimatedSendAt.Equal(at) {
			t.Errorf("estimated_send_at %v, want send_at %v (nothing else is due then)", a.EstimatedSendAt, at)
		}
		if a.ExpiresAt == nil || !a.ExpiresAt.Equal(at.Add(10*time.Minute)) {
			t.Errorf("expires_at %v, want send_at + ttl %v", a.ExpiresAt, at.Add(10*time.Minute))
		}
		var v httpapi.MessageView
		g := h.get("/v1/messages/"+a.ID, keyNotify)
		wantStatus(t, g, http.StatusOK)
		g.json(t, &v)
		if v.Status != sms.StatusScheduled || v.SendAt == nil || !v.SendAt.Equal(at) {
			t.Errorf("GET %+v, want scheduled", v)
		}
		// Once send_at has passed on the gateway's clock it reads queued
		// (the store's own clock still holds it: nothing is sent).
		clock.add(time.Hour + time.Second)
		g = h.get("/v1/messages/"+a.ID, keyNotify)
		g.json(t, &v)
		if v.Status != sms.StatusQueued {
			t.Errorf("GET after send_at: %s, want queued", v.Status)
		}
		if n := len(h.sim.Accepted()); n != 0 {
			t.Errorf("the provider got %d messages before their send_at", n)
		}
	})
}

func TestSendAtValidation(t *testing.T) {
	clock := newTestClock(time.Now())
	h := startClock(t, embeddedMode, nil, clock.now)
	now := clock.now()
	for _, tc := range []struct {
		name, sendAt string
		status       int
	}{
		{"not RFC 3339", now.Format(time.RFC1123), 400},
		{"no offset", now.Format("2006-01-02T15:04:05"), 400},
		{"an hour ago", now.Add(-time.Hour).Format(time.RFC3339), 400},
		{"36 days ahead", now.Add(36 * 24 * time.Hour).Format(time.RFC3339), 400},
		{"a little in the past", now.Add(-30 * time.Second).Format(time.RFC3339Nano), 202},
		{"35 days ahead", now.Add(35*24*time.Hour - time.Minute).Format(time.RFC3339), 202},
		{"another offset", now.Add(time.Hour).In(time.FixedZone("", 9*3600)).Format(time.RFC3339), 202},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := h.with(t)
			r := h.post("/v1/messages", keyNotify, msg("marketing", "send_at", tc.sendAt))
			wantStatus(t, r, tc.status)
			if tc.status == 400 {
				if f := r.fields(t); len(f) != 1 || f[0] != "send_at" {
					t.Errorf("fields %v, want send_at", f)
				}
			}
			b := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{msg("marketing", "send_at", tc.sendAt)}})
			wantStatus(t, b, http.StatusOK)
			var br httpapi.BatchResponse
			b.json(t, &br)
			if it := br.Results[0]; it.Status != tc.status || (tc.status == 400 && it.Error.Errors[0].Field != "messages[0].send_at") {
				t.Errorf("batch item %+v, want %d naming messages[0].send_at", it, tc.status)
			}
		})
	}
}

// A replay of an accepted request is answered as first, even once its
// send_at has passed and the request, new, would be refused.
func TestSendAtReplayAfterItPassed(t *testing.T) {
	clock := newTestClock(time.Now())
	h := startClock(t, embeddedMode, nil, clock.now)
	body := msg("transactional", "send_at", clock.now().Add(time.Minute).Format(time.RFC3339Nano))
	first := accepted(t, h.post("/v1/messages", keyNotify, body, "Idempotency-Key", "k-1"))
	clock.add(time.Hour)
	r := h.post("/v1/messages", keyNotify, body, "Idempotency-Key", "k-1")
	if a := accepted(t, r); a.ID != first.ID || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay %+v, want the first answer %s", a, first.ID)
	}
	wantStatus(t, h.post("/v1/messages", keyNotify, body), http.StatusBadRequest)
}

// A scheduled message's estimate counts what falls due before it: behind a
// campaign of 700 marketing messages scheduled for the same minute it goes
// 10 s (700 at 70/s) after send_at, and with a TTL shorter than that it
// is refused. What falls due later is not ahead of it.
func TestScheduledETACountsWhatFallsDueBefore(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		clock := newTestClock(time.Now().Truncate(time.Second))
		h := startClock(t, m, nil, clock.now)
		at := clock.now().Add(2 * time.Hour)
		sendAt := at.Format(time.RFC3339)
		wantStatus(t, h.post("/v1/messages/batch", keyNotify, batchOf(700, func(int) map[string]any {
			return msg("marketing", "send_at", sendAt)
		})), http.StatusOK)
		wantStatus(t, h.post("/v1/messages/batch", keyNotify, batchOf(300, func(int) map[string]any {
			return msg("marketing", "send_at", at.Add(time.Hour).Format(time.RFC3339))
		})), http.StatusOK)
		clock.add(2 * admission.ETARefresh) // what is stored, not what this replica remembers

		a := accepted(t, h.post("/v1/messages", keyNotify, msg("marketing", "send_at", sendAt)))
		if wait := a.EstimatedSendAt.Sub(at); math.Abs(wait.Seconds()-10) > 1 {
			t.Errorf("estimated %v after send_at, want about 10s", wait)
		}
		r := h.post("/v1/messages", keyNotify, msg("marketing", "send_at", sendAt, "ttl_seconds", 5))
		wantStatus(t, r, http.StatusTooManyRequests)
		// Transactional goes before the campaign.
		tx := accepted(t, h.post("/v1/messages", keyNotify, msg("transactional", "send_at", sendAt, "ttl_seconds", 5)))
		if !tx.EstimatedSendAt.Equal(at) {
			t.Errorf("transactional estimated %v, want %v", tx.EstimatedSendAt, at)
		}
	})
}

// quiet hours at accept: marketing that arrives at night in the
// recipient's zone waits for the morning (its estimate says when); one
// whose TTL ends first is refused with the wait until it would be
// admitted; transactional goes now.
func TestQuietHoursAtAccept(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	// 22:00 in Tokyo, within a day after the real now: the stores (real
	// clocks) hold what is held until 08:00 on the test's clock.
	l := time.Now().In(tokyo)
	night := time.Date(l.Year(), l.Month(), l.Day(), 22, 0, 0, 0, tokyo)
	if night.Before(time.Now()) {
		night = night.AddDate(0, 0, 1)
	}
	morning := night.Add(10 * time.Hour)
	clock := newTestClock(night)
	h := startClock(t, embeddedMode, func(c *config.Config) {
		c.Limits.Classes["marketing"] = config.ClassLimits{MaxRPS: 70,
			QuietHours: config.QuietHoursConfig{From: "21:00", To: "08:00"}}
	}, clock.now)

	a := accepted(t, h.post("/v1/messages", keyNotify, msg("marketing")))
	if !a.EstimatedSendAt.Equal(morning) || a.Status != sms.StatusQueued {
		t.Errorf("marketing at 22:00: %+v, want queued with estimated_send_at %v", a, morning)
	}
	r := h.post("/v1/messages", keyNotify, msg("marketing", "ttl_seconds", 3600))
	wantStatus(t, r, http.StatusTooManyRequests)
	// Admitted when the TTL reaches 08:00: at 07:00, 9 h from now.
	if ra, _ := strconv.Atoi(r.header.Get("Retry-After")); ra != 9*3600+1 {
		t.Errorf("Retry-After %d, want %d", ra, 9*3600+1)
	}
	tx := accepted(t, h.post("/v1/messages", keyNotify, msg("transactional", "ttl_seconds", 3600)))
	if tx.EstimatedSendAt.After(night.Add(time.Second)) {
		t.Errorf("transactional estimated %v, want now", tx.EstimatedSendAt)
	}
	// Scheduled for 07:59 local: held to 08:00, and its TTL counts from
	// send_at.
	s := accepted(t, h.post("/v1/messages", keyNotify, msg("marketing", "send_at", morning.Add(-time.Minute).Format(time.RFC3339), "ttl_seconds", 120)))
	// The first marketing message, held to 08:00 too, goes before it.
	if wait := s.EstimatedSendAt.Sub(morning); s.Status != sms.StatusScheduled || wait < 0 || wait > time.Second {
		t.Errorf("scheduled for 07:59: %+v, want scheduled, estimated just after %v", s, morning)
	}
}

// send_at at the zero instant of Go's time (0001-01-01T00:00:00Z, in any
// offset) is a time in the past like any other, not "send_at not given":
// a 400 naming send_at, on the single (in Redis mode the one-trip path) and
// the batch endpoint, as a second later is.
func TestSendAtZeroTimeRefused(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, nil)
		for _, at := range []string{"0001-01-01T00:00:00Z", "0001-01-01T09:00:00+09:00", "0001-01-01T00:00:00.000Z", "0001-01-01T00:00:01Z"} {
			r := h.post("/v1/messages", keyNotify, msg("transactional", "send_at", at))
			if r.status != http.StatusBadRequest {
				t.Errorf("send_at %s: status %d, want 400; body %s", at, r.status, r.body)
			} else if f := r.fields(t); len(f) != 1 || f[0] != "send_at" {
				t.Errorf("send_at %s: fields %v, want [send_at]", at, f)
			}
			b := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{msg("transactional", "send_at", at)}})
			wantStatus(t, b, http.StatusOK)
			var br httpapi.BatchResponse
			b.json(t, &br)
			if it := br.Results[0]; it.Status != http.StatusBadRequest || it.Error == nil ||
				len(it.Error.Errors) != 1 || it.Error.Errors[0].Field != "messages[0].send_at" {
				t.Errorf("send_at %s: batch item %+v, want 400 naming messages[0].send_at", at, it)
			}
		}
		if n := len(h.sim.Accepted()); n != 0 {
			t.Errorf("%d messages sent with a send_at in the past", n)
		}
	})
}

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

// wantHeldUntilResumed: while paused, every message of free is sent and
// none of held, all of held still ready in marketing (held are marketing
// messages); after POST /v1/admin/resume with resume (as h), every one of
// held is sent, and no message twice.
func wantHeldUntilResumed(t *testing.T, s *sim.Sim, h *harness, free, held []string, resume map[string]any) {
	t.Helper()
	waitSent(t, s, "every message not paused to be sent", free)
	wantUnsent(t, s, "during the pause", held)
	if q := h.stats().Classes["marketing"]; q.Ready != int64(len(held)) {
		t.Fatalf("marketing ready %d during the pause, want the %d paused", q.Ready, len(held))
	}
	wantStatus(t, h.post("/v1/admin/resume", keyAdmin, resume), http.StatusOK)
	waitSent(t, s, "every paused message to be sent after resume", held)
	wantSentOnce(t, s)
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
			wantHeldUntilResumed(t, s, last, transactional, marketing, map[string]any{"class": "marketing"})
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
			wantHeldUntilResumed(t, s, last, others, batch, map[string]any{"producer": "batch"})

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
