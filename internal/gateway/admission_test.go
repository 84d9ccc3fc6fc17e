package gateway

import (
	"bytes"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/httpapi"
)

// TestRetryingClientIsNotLockedOut is the classic increment-then-check
// bug: a client that keeps retrying while limited must be admitted once
// it waits the Retry-After of its first refusal. With a counter that
// counts refused requests, the hammering below would push the limit
// tens of seconds into the future.
func TestRetryingClientIsNotLockedOut(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		// "slow" at one message per 5 s, burst 2: the refusals below
		// all land well inside the first Retry-After, however slow a
		// loaded machine makes each request.
		h := start(t, m, func(c *config.Config) {
			for i := range c.Producers {
				if c.Producers[i].Name == "slow" {
					c.Producers[i].Rate = 0.2
				}
			}
		})
		for i := range 2 {
			wantStatus(t, h.post("/v1/messages", keySlow, msg("transactional", "reference", "r"+strconv.Itoa(i))), http.StatusAccepted)
		}
		first := h.post("/v1/messages", keySlow, msg("transactional"))
		firstAt := time.Now()
		wantStatus(t, first, http.StatusTooManyRequests)
		ra, err := strconv.Atoi(first.header.Get("Retry-After"))
		if err != nil || ra < 4 || ra > 5 {
			t.Fatalf("Retry-After %q", first.header.Get("Retry-After"))
		}
		if first.header.Get("RateLimit-Limit") != "2" || first.header.Get("RateLimit-Remaining") != "0" {
			t.Errorf("RateLimit headers %v", first.header)
		}
		if p := first.problem(t); p["type"] != httpapi.ProblemTypeBase+"rate-limited" {
			t.Errorf("problem %v", p)
		}
		// Hammer: every retry refused. A counter that counted refusals
		// would push the schedule out with each of them.
		refused := 0
		for refused < 20 {
			r := h.post("/v1/messages", keySlow, msg("transactional"))
			if r.status != http.StatusTooManyRequests {
				t.Fatalf("admitted after %d refusals, %s into a Retry-After of %ds", refused, time.Since(firstAt), ra)
			}
			refused++
		}
		time.Sleep(time.Until(firstAt.Add(time.Duration(ra) * time.Second)))
		wantStatus(t, h.post("/v1/messages", keySlow, msg("transactional")), http.StatusAccepted)
		t.Logf("%d refused retries; admitted after the first Retry-After (%ds)", refused, ra)
	})
}

// TestMaxOutstanding refuses past max_outstanding, and the refusal does
// not count: once messages are sent, the producer is admitted again.
func TestMaxOutstanding(t *testing.T) {
	h := start(t, embeddedMode, nil)
	wantStatus(t, h.post("/v1/admin/pause", keyAdmin, nil), http.StatusOK)
	for range 2 {
		wantStatus(t, h.post("/v1/messages", keyCapped, msg("transactional")), http.StatusAccepted)
	}
	for range 3 {
		r := h.post("/v1/messages", keyCapped, msg("transactional"))
		wantStatus(t, r, http.StatusTooManyRequests)
		if p := r.problem(t); p["type"] != httpapi.ProblemTypeBase+"too-many-outstanding" || p["max_outstanding"] != float64(2) {
			t.Fatalf("problem %v", p)
		}
	}
	wantStatus(t, h.post("/v1/admin/resume", keyAdmin, nil), http.StatusOK)
	// Wait for the queue to record both sends, not for the provider to
	// have them: a message stays outstanding until its Complete commits,
	// a moment after the provider's answer. The sent counter moves only
	// after that commit.
	eventually(t, "the backlog sent and recorded", func() bool { return h.stats().Classes["transactional"].SentTotal == 2 })
	wantStatus(t, h.post("/v1/messages", keyCapped, msg("transactional")), http.StatusAccepted)
}

// TestTTLShorterThanBacklogIsRefused: with a backlog ahead that takes
// longer than the message's TTL, the message is refused up front with the
// estimate, while one with a longer TTL is accepted with an honest ETA.
func TestTTLShorterThanBacklogIsRefused(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, func(c *config.Config) {
			c.Limits.TargetRPS = 10
			c.Limits.Classes = map[string]config.ClassLimits{"marketing": {MaxRPS: 5}}
		})
		wantStatus(t, h.post("/v1/admin/pause", keyAdmin, map[string]any{"reason": "build a backlog"}), http.StatusOK)
		// 50 marketing messages at 5/s: 10 s of backlog.
		items := make([]any, 50)
		for i := range items {
			items[i] = msg("marketing")
		}
		b := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": items})
		wantStatus(t, b, http.StatusOK)
		time.Sleep(2 * admission.ETARefresh)

		r := h.post("/v1/messages", keyNotify, msg("marketing", "ttl_seconds", 3))
		wantStatus(t, r, http.StatusTooManyRequests)
		p := r.problem(t)
		eta, err := time.Parse(time.RFC3339Nano, p["estimated_send_at"].(string))
		if err != nil || p["type"] != httpapi.ProblemTypeBase+"would-expire-before-send" {
			t.Fatalf("problem %v", p)
		}
		if wait := time.Until(eta); wait < 8*time.Second || wait > 12*time.Second {
			t.Errorf("estimated wait %v, want about 10s", wait)
		}
		if ra, _ := strconv.Atoi(r.header.Get("Retry-After")); ra < 5 {
			t.Errorf("Retry-After %q, want the ~7 s the backlog needs to drain below the TTL", r.header.Get("Retry-After"))
		}

		ok := h.post("/v1/messages", keyNotify, msg("marketing", "ttl_seconds", 60))
		wantStatus(t, ok, http.StatusAccepted)
		var a httpapi.AcceptedMessage
		ok.json(t, &a)
		if wait := time.Until(a.EstimatedSendAt); wait < 8*time.Second || wait > 12*time.Second {
			t.Errorf("estimated_send_at in %v, want about 10s", wait)
		}
		// Transactional goes ahead of the marketing backlog.
		tx := h.post("/v1/messages", keyNotify, msg("transactional", "ttl_seconds", 3))
		wantStatus(t, tx, http.StatusAccepted)
	})
}

// TestReplayBeforeTTLCheck: a retry of an accepted message gets its first
// answer even when the backlog has grown since and the TTL check would
// now refuse the same request: the stored answer comes first, in both
// modes (Redis runs the TTL check before its script, and then looks for
// the answer).
func TestReplayBeforeTTLCheck(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, func(c *config.Config) {
			c.Limits.TargetRPS = 10
			c.Limits.Classes = map[string]config.ClassLimits{"marketing": {MaxRPS: 5}}
		})
		wantStatus(t, h.post("/v1/admin/pause", keyAdmin, map[string]any{"reason": "build a backlog"}), http.StatusOK)
		body := msg("marketing", "ttl_seconds", 3)
		first := h.post("/v1/messages", keyNotify, body, "Idempotency-Key", "ttl-retry")
		wantStatus(t, first, http.StatusAccepted)
		items := make([]any, 50)
		for i := range items {
			items[i] = msg("marketing")
		}
		wantStatus(t, h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": items}), http.StatusOK)
		// The backlog is seen once the estimate rereads it: a new
		// request with the same body is refused...
		eventually(t, "the TTL check to see the backlog", func() bool {
			return h.post("/v1/messages", keyNotify, body).status == http.StatusTooManyRequests
		})
		// ...but the retry gets its first answer.
		again := h.post("/v1/messages", keyNotify, body, "Idempotency-Key", "ttl-retry")
		wantStatus(t, again, http.StatusAccepted)
		if !bytes.Equal(again.body, first.body) || again.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("retry %d %s, want the first answer %s", again.status, again.body, first.body)
		}
	})
}

// TestAdmissionConformance runs the same admission cases against both
// executors of admission.Order: in process (embedded store) and the
// enqueue script (Redis). Each case names the answer.
func TestAdmissionConformance(t *testing.T) {
	const (
		listed = "+819012345677" // on the suppression list
		other  = "+819012345676"
	)
	eachMode(t, func(t *testing.T, m mode) {
		clock := newTestClock(time.Now()) // frozen: the backlog estimate is read once
		h := startClock(t, m, func(c *config.Config) {
			for i := range c.Producers {
				switch c.Producers[i].Name {
				case "slow":
					c.Producers[i].Rate = 0.01 // burst 2, then one unit every 100 s
				case "login":
					c.Producers[i].Rate, c.Producers[i].Burst = 0.01, 1
				case "notify":
					c.Producers[i].MaxKeyedPerDay = 2
				}
			}
		}, clock.now)
		problemType := func(r reply) string {
			t.Helper()
			p, _ := r.problem(t)["type"].(string)
			return p
		}
		wantProblem := func(what string, r reply, status int, kind string) {
			t.Helper()
			if r.status != status || problemType(r) != httpapi.ProblemTypeBase+kind {
				t.Fatalf("%s: status %d problem %s; want %d %s", what, r.status, r.body, status, kind)
			}
		}

		past := clock.now().Add(-time.Hour).UTC().Format(time.RFC3339)
		r := h.post("/v1/messages", keyNotify, msg("transactional", "send_at", past))
		wantProblem("schedule", r, http.StatusBadRequest, "invalid")
		if !slices.Contains(r.fields(t), "send_at") {
			t.Errorf("schedule: fields %v, want send_at", r.fields(t))
		}

		first := h.post("/v1/messages", keyNotify, msg("transactional"), "Idempotency-Key", "conf-1")
		wantStatus(t, first, http.StatusAccepted)
		again := h.post("/v1/messages", keyNotify, msg("transactional"), "Idempotency-Key", "conf-1")
		wantStatus(t, again, http.StatusAccepted)
		if again.header.Get("Idempotent-Replayed") != "true" || accepted(t, again).ID != accepted(t, first).ID {
			t.Errorf("replay: %v %s; want the first answer (%s)", again.header, again.body, first.body)
		}
		wantProblem("key reused", h.post("/v1/messages", keyNotify, msg("marketing"), "Idempotency-Key", "conf-1"),
			http.StatusUnprocessableEntity, "idempotency-key-reused")

		// The keyed step, right after the replay: a second new key
		// spends notify's max_keyed_per_day of 2, a third is refused
		// naming the header and the config key; the replay and the
		// reused key above spent nothing, and a retry of an answered
		// key is still answered from its first answer.
		wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional"), "Idempotency-Key", "conf-2"), http.StatusAccepted)
		r = h.post("/v1/messages", keyNotify, msg("transactional"), "Idempotency-Key", "conf-3")
		wantProblem("keyed quota", r, http.StatusTooManyRequests, "too-many-keyed-requests")
		if d, _ := r.problem(t)["detail"].(string); !slices.Contains(r.fields(t), "Idempotency-Key") ||
			!strings.Contains(d, "producers[].max_keyed_per_day") {
			t.Errorf("keyed quota: fields %v, detail %q; want the header and the config key", r.fields(t), d)
		}
		if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Errorf("keyed quota: Retry-After %q", r.header.Get("Retry-After"))
		}
		again = h.post("/v1/messages", keyNotify, msg("transactional"), "Idempotency-Key", "conf-1")
		if again.status != http.StatusAccepted || !bytes.Equal(again.body, first.body) {
			t.Errorf("replay over the keyed quota: %d %s; want the first answer %s", again.status, again.body, first.body)
		}

		// A queued message to a listed number is accepted like any
		// other (its take ends it): the answer tells nothing of the list.
		wantStatus(t, h.post("/v1/admin/suppressions", keyAdmin, map[string]any{"to": listed}), http.StatusCreated)
		wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional", "to", listed)), http.StatusAccepted)

		for range 2 {
			wantStatus(t, h.post("/v1/messages", keySlow, msg("transactional")), http.StatusAccepted)
		}
		r = h.post("/v1/messages", keySlow, msg("transactional"))
		wantProblem("ingress quota", r, http.StatusTooManyRequests, "rate-limited")
		if r.header.Get("RateLimit-Limit") != "2" || r.header.Get("RateLimit-Remaining") != "0" || r.header.Get("Retry-After") == "" {
			t.Errorf("ingress quota: headers %v", r.header)
		}

		// An OTP's deadline counts from its arrival on the gateway's
		// clock: bring the frozen clock to now first.
		clock.add(time.Since(clock.now()))
		otp := map[string]any{"to": other, "body": "123456", "deadline_ms": 5000}
		wantStatus(t, h.post("/v1/otp", keyLogin, otp), http.StatusOK)
		wantProblem("otp quota", h.post("/v1/otp", keyLogin, otp), http.StatusTooManyRequests, "rate-limited")

		// Paused, nothing leaves the queue: max_outstanding holds.
		wantStatus(t, h.post("/v1/admin/pause", keyAdmin, map[string]any{"reason": "conformance"}), http.StatusOK)
		b := h.post("/v1/messages/batch", keyCapped, batchOf(3, func(int) map[string]any { return msg("transactional") }))
		wantStatus(t, b, http.StatusOK)
		var br struct {
			Accepted, Rejected int
			Results            []struct {
				Status int
				Error  *struct{ Type string }
			}
		}
		b.json(t, &br)
		if br.Accepted != 2 || br.Rejected != 1 || len(br.Results) != 3 || br.Results[2].Status != http.StatusTooManyRequests ||
			br.Results[2].Error == nil || br.Results[2].Error.Type != httpapi.ProblemTypeBase+"too-many-outstanding" {
			t.Fatalf("batch partial accept: %s", b.body)
		}
		wantProblem("outstanding", h.post("/v1/messages", keyCapped, msg("transactional")),
			http.StatusTooManyRequests, "too-many-outstanding")

		// A backlog the frozen clock never drains: a 1 s TTL lapses
		// before its turn, whatever the number.
		wantStatus(t, h.post("/v1/messages/batch", keyNotify, batchOf(httpapi.MaxBatch, func(int) map[string]any { return msg("marketing") })),
			http.StatusOK)
		wantProblem("ttl", h.post("/v1/messages", keyNotify, msg("marketing", "ttl_seconds", 1)),
			http.StatusTooManyRequests, "would-expire-before-send")
		wantProblem("ttl, listed number", h.post("/v1/messages", keyNotify, msg("marketing", "ttl_seconds", 1, "to", listed)),
			http.StatusTooManyRequests, "would-expire-before-send")
	})
}
