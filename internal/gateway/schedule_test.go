package gateway

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/httpapi"
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
