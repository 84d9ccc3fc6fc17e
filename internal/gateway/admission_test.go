package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
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
	"smsgw/internal/provider/sim"
	"smsgw/internal/sms"
	"smsgw/internal/state"
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

// startBacklogged starts a gateway at 10/s, marketing at 5/s, paused so
// that what is accepted builds a backlog.
func startBacklogged(t *testing.T, m mode) *harness {
	t.Helper()
	h := start(t, m, func(c *config.Config) {
		c.Limits.TargetRPS = 10
		c.Limits.Classes = map[string]config.ClassLimits{"marketing": {MaxRPS: 5}}
	})
	wantStatus(t, h.post("/v1/admin/pause", keyAdmin, map[string]any{"reason": "build a backlog"}), http.StatusOK)
	return h
}

// TestTTLShorterThanBacklogIsRefused: with a backlog ahead that takes
// longer than the message's TTL, the message is refused up front with the
// estimate, while one with a longer TTL is accepted with an honest ETA.
func TestTTLShorterThanBacklogIsRefused(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := startBacklogged(t, m)
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
		h := startBacklogged(t, m)
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

func TestBatch(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, nil)
		items := []any{
			msg("marketing", "reference", "ok-0"),
			msg("marketing", "to", "12345"),
			msg("otp"), // not allowed for this producer
			msg("transactional", "body", "a\x00b"),
			msg("marketing", "priority", 1),
			"not an object",
			msg("transactional", "reference", "ok-6"),
		}
		r := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": items})
		wantStatus(t, r, http.StatusOK)
		var out httpapi.BatchResponse
		r.json(t, &out)
		if out.Accepted != 2 || out.Rejected != 5 || len(out.Results) != len(items) {
			t.Fatalf("accepted %d rejected %d results %d", out.Accepted, out.Rejected, len(out.Results))
		}
		want := []struct {
			status int
			field  string
		}{{202, ""}, {400, "messages[1].to"}, {403, ""}, {400, "messages[3].body"}, {400, "messages[4].priority"}, {400, "messages[5]"}, {202, ""}}
		for i, w := range want {
			res := out.Results[i]
			if res.Index != i || res.Status != w.status {
				t.Errorf("item %d: index %d status %d, want %d", i, res.Index, res.Status, w.status)
				continue
			}
			if w.status == 202 {
				if res.Message == nil || res.Error != nil {
					t.Errorf("item %d: %+v", i, res)
				}
				continue
			}
			if res.Error == nil || res.Message != nil || res.Error.Status != w.status {
				t.Errorf("item %d: %+v", i, res)
				continue
			}
			if w.field != "" && (len(res.Error.Errors) == 0 || res.Error.Errors[0].Field != w.field) {
				t.Errorf("item %d names %v, want %s", i, res.Error.Errors, w.field)
			}
		}
		ids := map[string]bool{out.Results[0].Message.ID: true, out.Results[6].Message.ID: true}
		eventually(t, "both accepted items sent", func() bool {
			refs := sentRefs(h.sim)
			n := 0
			for id := range ids {
				n += refs[id]
			}
			return n == 2
		})
		if n := len(h.sim.Accepted()); n != 2 {
			t.Errorf("provider got %d sends, want 2", n)
		}
	})
}

func TestBatchLimits(t *testing.T) {
	h := start(t, embeddedMode, nil)
	wantStatus(t, h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{}}), http.StatusBadRequest)
	big := make([]any, httpapi.MaxBatch+1)
	for i := range big {
		big[i] = msg("marketing")
	}
	r := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": big})
	wantStatus(t, r, http.StatusBadRequest)
	if f := r.fields(t); len(f) != 1 || f[0] != "messages" {
		t.Errorf("fields %v", f)
	}
	ok := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": big[:httpapi.MaxBatch]})
	wantStatus(t, ok, http.StatusOK)
	var out httpapi.BatchResponse
	ok.json(t, &out)
	if out.Accepted != httpapi.MaxBatch {
		t.Errorf("accepted %d of %d", out.Accepted, httpapi.MaxBatch)
	}
}

// TestBatchOverBurst: a batch larger than the producer's burst queues what
// fits and refuses the rest item by item; when nothing fits it is a 429.
func TestBatchOverBurst(t *testing.T) {
	h := start(t, embeddedMode, nil)
	items := []any{msg("transactional"), msg("transactional"), msg("transactional"), msg("transactional", "to", "x")}
	r := h.post("/v1/messages/batch", keySlow, map[string]any{"messages": items})
	wantStatus(t, r, http.StatusOK)
	var out httpapi.BatchResponse
	r.json(t, &out)
	got := []int{}
	for _, it := range out.Results {
		got = append(got, it.Status)
	}
	if out.Accepted != 2 || got[0] != 202 || got[1] != 202 || got[2] != 429 || got[3] != 400 {
		t.Fatalf("statuses %v", got)
	}
	if !strings.Contains(out.Results[2].Error.Type, "rate-limited") {
		t.Errorf("item 2: %+v", out.Results[2].Error)
	}
	again := h.post("/v1/messages/batch", keySlow, map[string]any{"messages": items[:2]})
	wantStatus(t, again, http.StatusTooManyRequests)
	if again.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
}

// TestBatchAnswerBudget: a batch answer is kept for replay only within
// 1 KiB (compressed) per accepted item. One accepted item and 999 refused
// ones, each naming an unknown member of the client's choosing (reflected
// in its problem), made Redis keep ~98 KB for 24 h for one unit of quota
// (an audit measured it); now that answer is not kept, and a replay runs
// the batch again, the queue answering the accepted item with the same
// message. An ordinary batch is still kept and replayed.
func TestBatchAnswerBudget(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, nil)
		items := []any{msg("transactional")}
		for range 999 {
			bad := msg("transactional")
			bad["x"+rand.Text()+rand.Text()] = 1 // 53 characters nobody else chose
			items = append(items, bad)
		}
		big := map[string]any{"messages": items}
		first := h.post("/v1/messages/batch", keyNotify, big, "Idempotency-Key", "big-batch-1")
		wantStatus(t, first, http.StatusOK)
		var a, b httpapi.BatchResponse
		first.json(t, &a)
		if a.Accepted != 1 || a.Rejected != 999 {
			t.Fatalf("accepted %d, rejected %d; want 1 and 999", a.Accepted, a.Rejected)
		}
		notKept := func() float64 {
			return metricValues(h.metrics(), "smsgw_api_idempotent_answers_not_kept_total")["smsgw_api_idempotent_answers_not_kept_total"]
		}
		if n := notKept(); n != 1 {
			t.Errorf("answers not kept: %v, want 1", n)
		}
		again := h.post("/v1/messages/batch", keyNotify, big, "Idempotency-Key", "big-batch-1")
		wantStatus(t, again, http.StatusOK)
		again.json(t, &b)
		if again.header.Get("Idempotent-Replayed") != "" {
			t.Error("a batch answer over its budget was replayed from the store")
		}
		if b.Accepted != 1 || b.Results[0].Message == nil || b.Results[0].Message.ID != a.Results[0].Message.ID {
			t.Fatalf("the batch run again accepted %d, first item %+v; want the first message %s", b.Accepted, b.Results[0], a.Results[0].Message.ID)
		}

		small := map[string]any{"messages": []any{msg("transactional"), msg("transactional"), map[string]any{"to": "nope"}}}
		wantStatus(t, h.post("/v1/messages/batch", keyNotify, small, "Idempotency-Key", "small-batch-1"), http.StatusOK)
		r := h.post("/v1/messages/batch", keyNotify, small, "Idempotency-Key", "small-batch-1")
		wantStatus(t, r, http.StatusOK)
		if r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("an ordinary batch answer was not replayed: %s", fmt.Sprint(r.header))
		}
		if n := notKept(); n != 2 { // the big one, run twice
			t.Errorf("answers not kept: %v, want 2", n)
		}
	})
}

// invalidBatch is a batch of n items that all fail validation.
func invalidBatch(n int) map[string]any {
	items := make([]any, n)
	for i := range items {
		items[i] = msg("transactional", "to", "x")
	}
	return map[string]any{"messages": items}
}

// TestRefusedBatchNotAmplified: a batch refused whole
// stores no answer and costs ingress quota, so a producer cannot grow the
// answer store (or its memory) for free; a mixed batch's answer is stored
// compact, far smaller than the body sent.
func TestRefusedBatchNotAmplified(t *testing.T) {
	h := start(t, embeddedMode, nil)
	store := h.app.srv.Store.Idem.(*state.LocalIdempotency)
	for i := range 3 {
		r := h.post("/v1/messages/batch", keyNotify, invalidBatch(1000), "Idempotency-Key", "refused-"+strconv.Itoa(i))
		wantStatus(t, r, http.StatusOK)
		var b httpapi.BatchResponse
		r.json(t, &b)
		if b.Accepted != 0 || b.Rejected != 1000 {
			t.Fatalf("accepted %d rejected %d", b.Accepted, b.Rejected)
		}
	}
	if n, size := store.Size(); n != 0 || size != 0 {
		t.Errorf("3 batches refused whole left %d answers (%d bytes) in the store", n, size)
	}

	// A tenth accepted: within the answer's store budget (1 KiB per
	// accepted item, TestBatchAnswerBudget), so it is kept.
	mixed := invalidBatch(1000)
	for i := range 100 {
		mixed["messages"].([]any)[i*10] = msg("transactional")
	}
	r := h.post("/v1/messages/batch", keyNotify, mixed, "Idempotency-Key", "mixed")
	wantStatus(t, r, http.StatusOK)
	n, size := store.Size()
	if n != 1 || size*20 > int64(len(r.body)) {
		t.Errorf("a %d-byte answer is stored as %d answers of %d bytes; want 1, at most 1/20 of the body", len(r.body), n, size)
	}
	again := h.post("/v1/messages/batch", keyNotify, mixed, "Idempotency-Key", "mixed")
	wantStatus(t, again, http.StatusOK)
	if again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(r.body) {
		t.Errorf("the replay differs from the first answer")
	}
}

// TestRefusedBatchCostsQuota: a batch refused whole takes one unit of the
// producer's ingress quota, so repeating it ends in 429.
func TestRefusedBatchCostsQuota(t *testing.T) {
	h := start(t, embeddedMode, nil) // slow: 2/s, burst 2
	got := map[int]int{}
	for range 10 {
		r := h.post("/v1/messages/batch", keySlow, invalidBatch(2))
		got[r.status]++
		if r.status == http.StatusTooManyRequests && r.header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	}
	if got[http.StatusTooManyRequests] == 0 {
		t.Errorf("10 refused batches at 2/s with a burst of 2: statuses %v, want a 429", got)
	}
}

// segmentsBody is a GSM-7 body of n segments (153 characters each).
func segmentsBody(n int) string { return strings.Repeat("a", 153*(n-1)+1) }

// wantBodyRefused checks a 400 naming field whose reason says how many
// segments the body needs, the most allowed and the key that bounds it.
func wantBodyRefused(t *testing.T, h *harness, r reply, field, needs, most, key string) {
	t.Helper()
	if r.status == http.StatusAccepted {
		// What the old code did: accept, then fail the message in dispatch.
		var a httpapi.AcceptedMessage
		r.json(t, &a)
		var v httpapi.MessageView
		eventually(t, "the accepted message ends", func() bool {
			v = h.status(t, a.ID)
			return v.Status.Done()
		})
		t.Fatalf("accepted with 202, then %s (%q); want 400 naming %s", v.Status, v.LastError, field)
	}
	wantStatus(t, r, http.StatusBadRequest)
	errs, _ := r.problem(t)["errors"].([]any)
	if len(errs) != 1 {
		t.Fatalf("errors %v, want one naming %s", errs, field)
	}
	e := errs[0].(map[string]any)
	reason, _ := e["reason"].(string)
	if e["field"] != field || !strings.Contains(reason, needs) || !strings.Contains(reason, most) || !strings.Contains(reason, "("+key) {
		t.Errorf("error %v, want %s: %s … %s (%s …)", e, field, needs, most, key)
	}
}

// With the defaults (limits.burst 5, messages.max_segments 10, segments
// counted) a message of 6 to 10 segments was accepted and then failed for
// good: the limiter can never grant more than its burst at once. It is
// refused at the door now, on every path that accepts a message, and
// nothing is sent.
func TestSegmentsBeyondBurstRefused(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, nil)
		wantBodyRefused(t, h, h.post("/v1/messages", keyNotify, msg("transactional", "body", segmentsBody(7))),
			"body", "needs 7 GSM-7 segments", "at most 5 per message", "limits.burst")

		b := h.post("/v1/messages/batch", keyNotify, batchOf(2, func(i int) map[string]any {
			return msg("transactional", "body", segmentsBody(5+i), "reference", "ok")
		}))
		wantStatus(t, b, http.StatusOK)
		var out httpapi.BatchResponse
		b.json(t, &out)
		if out.Accepted != 1 || out.Rejected != 1 || out.Results[0].Status != http.StatusAccepted || out.Results[1].Status != http.StatusBadRequest {
			t.Fatalf("batch of 5 and 6 segments: %+v, want the first accepted, the second refused", out)
		}
		if e := out.Results[1].Error; len(e.Errors) != 1 || e.Errors[0].Field != "messages[1].body" || !strings.Contains(e.Errors[0].Reason, "limits.burst") {
			t.Errorf("batch item refused with %+v, want messages[1].body (limits.burst)", e.Errors)
		}

		wantBodyRefused(t, h, h.post("/v1/otp", keyLogin, map[string]any{"to": "+819012345678", "body": segmentsBody(6)}),
			"body", "needs 6 GSM-7 segments", "at most 5 per message", "limits.burst")

		id := out.Results[0].Message.ID
		eventually(t, "the 5-segment message sent", func() bool { return sentRefs(h.sim)[id] > 0 })
		if refs := sentRefs(h.sim); len(refs) != 1 {
			t.Errorf("the provider got %v, want only the 5-segment message", refs)
		}
	})
}

// A class burst below limits.burst bounds that class and is named; with
// segments not counted every message costs 1 and only max_segments holds.
func TestSegmentsBeyondClassBurst(t *testing.T) {
	t.Parallel()
	h := start(t, embeddedMode, func(c *config.Config) {
		c.Limits.Classes = map[string]config.ClassLimits{"marketing": {MaxRPS: 70, Burst: 3}}
	})
	wantBodyRefused(t, h, h.post("/v1/messages", keyNotify, msg("marketing", "body", segmentsBody(4))),
		"body", "needs 4 GSM-7 segments", "at most 3 per message", "limits.classes.marketing.burst")
	accepted(t, h.post("/v1/messages", keyNotify, msg("transactional", "body", segmentsBody(4))))

	u := start(t, embeddedMode, func(c *config.Config) { c.Provider.CountSegments = false })
	accepted(t, u.post("/v1/messages", keyNotify, msg("transactional", "body", segmentsBody(10))))
}

// The accept check and the dispatcher read the same bound: what
// config.SegmentsPerMessage lets in (when the burst bounds it) is what the
// shared limiter built by limiterConfig grants at most.
func TestSegmentsPerMessageIsLimiterMaxCost(t *testing.T) {
	t.Parallel()
	for _, classes := range []map[string]config.ClassLimits{
		nil,
		{"marketing": {MaxRPS: 70}},
		{"marketing": {MaxRPS: 70, Burst: 2}},
		{"marketing": {MaxRPS: 70, Burst: 9}, "transactional": {MaxRPS: 80, Burst: 3}},
	} {
		cfg := config.Default()
		cfg.Messages.MaxSegments = 255
		cfg.Limits.Classes = classes
		for _, c := range sms.Classes {
			most, key := cfg.SegmentsPerMessage(c.String())
			if want := limiterConfig(cfg).MaxCost(c.String()); most != want || key == "messages.max_segments" {
				t.Errorf("classes %v, %s: %d (%s), limiter grants at most %d", classes, c, most, key, want)
			}
		}
	}
}

func TestIdempotencyKey(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, nil)
		body := msg("transactional", "reference", "invoice-9")
		first := h.post("/v1/messages", keyNotify, body, "Idempotency-Key", "order-9-confirmation")
		wantStatus(t, first, http.StatusAccepted)
		if first.header.Get("Idempotent-Replayed") != "" {
			t.Error("first answer marked as replayed")
		}
		again := h.post("/v1/messages", keyNotify, body, "Idempotency-Key", "order-9-confirmation")
		wantStatus(t, again, http.StatusAccepted)
		if again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(first.body, again.body) ||
			again.header.Get("Location") != first.header.Get("Location") {
			t.Errorf("replay %s %v, want the first answer %s", again.body, again.header, first.body)
		}
		// The same key from another producer is another key.
		other := h.post("/v1/messages", keySlow, body, "Idempotency-Key", "order-9-confirmation")
		wantStatus(t, other, http.StatusAccepted)
		if bytes.Equal(other.body, first.body) {
			t.Error("another producer got this producer's answer")
		}
		changed := h.post("/v1/messages", keyNotify, msg("transactional", "reference", "invoice-10"), "Idempotency-Key", "order-9-confirmation")
		wantStatus(t, changed, http.StatusUnprocessableEntity)
		if p := changed.problem(t); p["type"] != httpapi.ProblemTypeBase+"idempotency-key-reused" {
			t.Errorf("problem %v", p)
		}
		bad := h.post("/v1/messages", keyNotify, body, "Idempotency-Key", "")
		wantStatus(t, bad, http.StatusBadRequest)

		var a httpapi.AcceptedMessage
		first.json(t, &a)
		eventually(t, "the send", func() bool { return sentRefs(h.sim)[a.ID] == 1 })
		time.Sleep(200 * time.Millisecond)
		if n := len(h.sim.Accepted()); n != 2 {
			t.Errorf("the provider got %d sends, want 2 (one per producer)", n)
		}
	})
}

// TestIdempotencyInFlight: a retry that races the first request gets 409
// with Retry-After, then the first answer once it is stored. In Redis mode
// a single message has no in-flight step (one script admits, stores and
// keeps the answer: TestIdempotencyRaceOneTrip); there the batch endpoint
// shows the lock.
func TestIdempotencyInFlight(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, nil)
		p, _ := h.app.srv.Edge.Auth.ProducerFor(config.Producer{Key: keyNotify}.KeyHash())
		path, scope := "/v1/messages", "message"
		var body any = msg("transactional")
		if m == redisMode {
			path, scope = "/v1/messages/batch", "batch"
			body = map[string]any{"messages": []any{msg("transactional")}}
		}
		k := admission.IdemKey(p.Name, scope, "slow-first")
		// Hold the lock as a first request still in progress would.
		_, token, err := h.app.srv.Store.Idem.Acquire(context.Background(), k, time.Minute)
		if err != nil || token == "" {
			t.Fatalf("acquire: %q %v", token, err)
		}
		r := h.post(path, keyNotify, body, "Idempotency-Key", "slow-first")
		wantStatus(t, r, http.StatusConflict)
		if r.header.Get("Retry-After") != "1" {
			t.Errorf("Retry-After %q", r.header.Get("Retry-After"))
		}
		if err := h.app.srv.Store.Idem.Finish(context.Background(), k, token, nil); err != nil {
			t.Fatal(err)
		}
		r = h.post(path, keyNotify, body, "Idempotency-Key", "slow-first")
		if r.status != http.StatusAccepted && r.status != http.StatusOK {
			t.Errorf("after the lock: status %d", r.status)
		}
	})
}

// redisReplicas starts n replicas on one Redis, each with a store path of
// its own, sending to one simulator.
func redisReplicas(t *testing.T, n int) (*sim.Sim, []*harness) {
	t.Helper()
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, redisMode, s.URL())
	hs := make([]*harness, 0, n)
	for range n {
		c := cfg
		c.Store.Path = t.TempDir()
		hs = append(hs, startWith(t, c, s))
	}
	return s, hs
}

// TestIdempotencyRaceOneTrip: in Redis mode, concurrent retries of one
// single message with one Idempotency-Key, on two replicas, store one
// message; every answer is the first answer byte for byte, and exactly one
// is not marked replayed.
func TestIdempotencyRaceOneTrip(t *testing.T) {
	s, hs := redisReplicas(t, 2)
	body := msg("transactional", "reference", "race")
	const n = 24
	answers := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = hs[i%2].post("/v1/messages", keyNotify, body, "Idempotency-Key", "race-1") })
	}
	wg.Wait()
	first := 0
	for i, a := range answers {
		wantStatus(t, a, http.StatusAccepted)
		if a.header.Get("Idempotent-Replayed") == "" {
			first++
		}
		if !bytes.Equal(a.body, answers[0].body) {
			t.Errorf("answer %d %s, want %s", i, a.body, answers[0].body)
		}
	}
	if first != 1 {
		t.Errorf("%d answers not marked replayed, want 1", first)
	}
	var a httpapi.AcceptedMessage
	answers[0].json(t, &a)
	eventually(t, "the send", func() bool { return sentRefs(s)[a.ID] == 1 })
	if got := len(s.Accepted()); got != 1 {
		t.Errorf("the provider got %d sends, want 1", got)
	}
}

// TestIdempotencyAcrossReplicas: three replicas on one Redis; a POST
// retried on another replica yields the same id and one send.
func TestIdempotencyAcrossReplicas(t *testing.T) {
	s, hs := redisReplicas(t, 3)
	body := msg("transactional")
	var ids []string
	for i, h := range hs {
		r := h.post("/v1/messages", keyNotify, body, "Idempotency-Key", "checkout-42")
		wantStatus(t, r, http.StatusAccepted)
		var a httpapi.AcceptedMessage
		r.json(t, &a)
		ids = append(ids, a.ID)
		if replayed := r.header.Get("Idempotent-Replayed") == "true"; replayed != (i > 0) {
			t.Errorf("replica %d: Idempotent-Replayed %v", i, replayed)
		}
	}
	if ids[0] != ids[1] || ids[1] != ids[2] {
		t.Fatalf("ids %v, want one id", ids)
	}
	eventually(t, "the send", func() bool { return sentRefs(s)[ids[0]] >= 1 })
	time.Sleep(300 * time.Millisecond)
	if n := len(s.Accepted()); n != 1 {
		t.Errorf("the provider got %d sends, want 1", n)
	}
	// The batch and OTP endpoints replay too.
	items := map[string]any{"messages": []any{msg("transactional", "reference", "a"), msg("transactional", "to", "bad")}}
	b1 := hs[0].post("/v1/messages/batch", keyNotify, items, "Idempotency-Key", "batch-7")
	b2 := hs[1].post("/v1/messages/batch", keyNotify, items, "Idempotency-Key", "batch-7")
	wantStatus(t, b1, http.StatusOK)
	if !bytes.Equal(b1.body, b2.body) || b2.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("batch replay %s, want %s", b2.body, b1.body)
	}
}

// TestIdempotencySurvivesRestart: the embedded answer store is memory, but
// the queue keeps (producer, key) → id on disk; after a restart a replay
// still gets the first id (and a changed body still gets 422).
func TestIdempotencySurvivesRestart(t *testing.T) {
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, embeddedMode, s.URL())
	h1 := startWith(t, cfg, s)
	body := msg("marketing", "reference", "promo-1")
	first := h1.post("/v1/messages", keyNotify, body, "Idempotency-Key", "promo-1")
	wantStatus(t, first, http.StatusAccepted)
	if err := h1.app.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	h2 := startWith(t, cfg, s)
	// A changed body first, so that it is told apart by the stored
	// message, not by an answer cached by the replay below.
	changed := h2.post("/v1/messages", keyNotify, msg("marketing", "reference", "promo-2"), "Idempotency-Key", "promo-1")
	wantStatus(t, changed, http.StatusUnprocessableEntity)
	again := h2.post("/v1/messages", keyNotify, body, "Idempotency-Key", "promo-1")
	wantStatus(t, again, http.StatusAccepted)
	var a, b httpapi.AcceptedMessage
	first.json(t, &a)
	again.json(t, &b)
	if a.ID != b.ID || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("after restart: %s %v, want id %s replayed", again.body, again.header, a.ID)
	}
}

// TestIdemKeyStable pins the store key of an Idempotency-Key: keys live in
// Redis for the idempotency window, so a release that changed them would
// let a retry across an upgrade queue a second message.
func TestIdemKeyStable(t *testing.T) {
	t.Parallel()
	if got, want := admission.IdemKey("notify", "message", "order-9"), "2fa6f4fcfa9fa4ac7d325921d9f75074db7ef67a"; got != want {
		t.Errorf("idemKey = %s, want %s", got, want)
	}
}

// postKeys posts body to path with the Idempotency-Key header once per
// key (the harness's header map holds one value a name).
func (h *harness) postKeys(path, key string, body any, idemKeys ...string) reply {
	h.t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		h.t.Fatal(err)
	}
	hr, err := http.NewRequestWithContext(h.t.Context(), http.MethodPost, h.base+path, bytes.NewReader(raw))
	if err != nil {
		h.t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+key)
	for _, k := range idemKeys {
		hr.Header.Add("Idempotency-Key", k)
	}
	return h.send(hr)
}

// An Idempotency-Key sent twice is a 400 naming the header, on every
// endpoint that takes one, whether the values differ or not: nothing is
// sent, queued or kept under either key, so a later request with one of
// them is answered as a first request.
func TestIdempotencyKeyTwiceRefused(t *testing.T) {
	otpBody := map[string]any{"to": "+819012345678", "body": "code 1234"}
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, nil)
		cases := []struct {
			path, key string
			body      any
			ok        int
		}{
			{"/v1/messages", keyNotify, msg("transactional"), http.StatusAccepted},
			{"/v1/messages/batch", keyNotify, map[string]any{"messages": []any{msg("transactional")}}, http.StatusOK},
			{"/v1/otp", keyLogin, otpBody, http.StatusOK},
		}
		for _, c := range cases {
			for _, keys := range [][]string{{"k-first", "k-second"}, {"k-same", "k-same"}} {
				r := h.postKeys(c.path, c.key, c.body, keys...)
				wantProblem(t, r, http.StatusBadRequest, httpapi.KindInvalid, "Idempotency-Key")
			}
		}
		if n := len(h.sim.Accepted()); n != 0 {
			t.Errorf("%d sends after refused requests", n)
		}
		if st := h.stats(); st.Classes["transactional"].Ready+st.Classes["transactional"].Leased != 0 {
			t.Errorf("refused requests queued messages: %+v", st.Classes["transactional"])
		}
		for _, c := range cases {
			for _, k := range []string{"k-first", "k-second", "k-same"} {
				r := h.postKeys(c.path, c.key, c.body, k)
				wantStatus(t, r, c.ok)
				if r.header.Get("Idempotent-Replayed") != "" {
					t.Errorf("%s with key %s: replayed an answer kept for a refused request", c.path, k)
				}
			}
		}
	})
}

// TestKeyedRequestsBounded, in both modes, through real HTTP: what a
// producer can make the gateway keep for the idempotency window is
// bounded by producers[].max_keyed_per_day. Within it, keyed requests
// (single and batch) are accepted; past it a keyed request with a new key
// is 429 too-many-keyed-requests naming the key and the header, with
// Retry-After; a retry of a key already answered
// still gets its first answer, byte for byte, and a request without a key
// is accepted. Another producer has its own bound.
func TestKeyedRequestsBounded(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, func(c *config.Config) { c.Producers[0].MaxKeyedPerDay = 3 })
		keyed := func(key string) reply {
			return h.post("/v1/messages", keyNotify, msg("transactional"), "Idempotency-Key", key)
		}
		first := keyed("order-1")
		wantStatus(t, first, http.StatusAccepted)
		wantStatus(t, keyed("order-2"), http.StatusAccepted)
		b := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{msg("transactional")}}, "Idempotency-Key", "batch-1")
		wantStatus(t, b, http.StatusOK)

		over := keyed("order-3")
		p := wantProblem(t, over, http.StatusTooManyRequests, httpapi.ProblemKind("too-many-keyed-requests"), "Idempotency-Key")
		if d, _ := p["detail"].(string); !strings.Contains(d, "producers[].max_keyed_per_day") {
			t.Errorf("detail %q does not name the key", d)
		}
		if ra, err := strconv.Atoi(over.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Errorf("Retry-After %q", over.header.Get("Retry-After"))
		}
		again := keyed("order-1")
		wantStatus(t, again, http.StatusAccepted)
		if string(again.body) != string(first.body) || again.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("retry of an answered key: %s (replayed %q), first %s", again.body, again.header.Get("Idempotent-Replayed"), first.body)
		}
		wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
		wantStatus(t, h.post("/v1/messages", keyLogin, msg("otp"), "Idempotency-Key", "order-3"), http.StatusAccepted)
	})
}

// budgetUnits is the budget of the exactness test: a few hundred messages.
const budgetUnits = 500

// twoSegments is a GSM-7 body of two segments (over 160 characters).
var twoSegments = strings.Repeat("Your parcel arrives today. ", 7)

// withBudget gives notify a daily budget of units.
func withBudget(units int64) func(*config.Config) {
	return func(c *config.Config) {
		for i := range c.Producers {
			if c.Producers[i].Name == "notify" {
				c.Producers[i].Budget = config.BudgetConfig{DailyUnits: units}
			}
		}
	}
}

// budgetClient posts to its replica until a one-segment message is
// refused for the budget (a two-segment one refused may leave one unit,
// which a one-segment message then takes), and returns the ids and units
// it had accepted. Every refusal must be budget-exhausted.
type budgetClient struct {
	ids   []string
	units []int
	bad   []string
}

func (c *budgetClient) run(h *harness, seed int) {
	for i := seed; ; i++ {
		body := "Your parcel arrives today"
		if i%2 == 0 {
			body = twoSegments
		}
		r := h.post("/v1/messages", keyNotify, msg("transactional", "body", body))
		switch r.status {
		case http.StatusAccepted:
			var a struct {
				ID       string `json:"id"`
				Segments int    `json:"segments"`
			}
			r.json(h.t, &a)
			c.ids, c.units = append(c.ids, a.ID), append(c.units, a.Segments)
		case http.StatusTooManyRequests:
			if p := r.problem(h.t); p["type"] != httpapi.ProblemTypeBase+"budget-exhausted" || p["period"] != "daily" {
				c.bad = append(c.bad, string(r.body))
				return
			}
			if body != twoSegments {
				return
			}
		default:
			c.bad = append(c.bad, strconv.Itoa(r.status)+" "+string(r.body))
			return
		}
	}
}

// fill runs 8 clients at once over the replicas until the budget is spent;
// it returns every accepted id with its units.
func fill(t *testing.T, replicas []*harness) map[string]int {
	t.Helper()
	clients := make([]budgetClient, 8)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() { clients[i].run(replicas[i%len(replicas)].with(t), i) })
	}
	wg.Wait()
	out := map[string]int{}
	for _, c := range clients {
		if len(c.bad) > 0 {
			t.Fatalf("a refusal that is not the daily budget: %v", c.bad)
		}
		for k, id := range c.ids {
			out[id] = c.units[k]
		}
	}
	return out
}

func sumUnits(m map[string]int) int {
	n := 0
	for _, u := range m {
		n += u
	}
	return n
}

// TestBudgetExactUnderConcurrency: 8 concurrent clients against a daily
// budget of 500 units, mixed one- and two-segment messages, accept
// exactly 500 units, through real HTTP on the embedded store and on two
// Redis replicas sharing one account; the refusal is 429 budget-exhausted
// with Retry-After to the next UTC midnight and the RateLimit headers.
// Then canceling 10 queued one-segment messages gives exactly 10 units
// back: 10 more are accepted, the 11th refused.
func TestBudgetExactUnderConcurrency(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, withBudget(budgetUnits))
			replicas := []*harness{h}
			if m == redisMode {
				replicas = append(replicas, startWith(t, h.cfg, h.sim))
			}
			// Nothing is sent: every accepted message stays queued, cancelable.
			wantStatus(t, h.post("/v1/admin/pause", keyAdmin, nil), http.StatusOK)
			accepted := fill(t, replicas)
			if got := sumUnits(accepted); got != budgetUnits {
				t.Fatalf("accepted %d units in %d messages; want exactly %d", got, len(accepted), budgetUnits)
			}
			twos := 0
			for _, u := range accepted {
				if u == 2 {
					twos++
				}
			}
			if twos == 0 || twos == len(accepted) {
				t.Fatalf("%d of %d messages had two segments; want a mix", twos, len(accepted))
			}
			t.Logf("%s: %d replicas, 8 clients: %d messages (%d of two segments) = %d units accepted",
				m, len(replicas), len(accepted), twos, sumUnits(accepted))

			// Every replica reports the shared count against the cap.
			for _, rep := range replicas {
				got := metricValues(rep.metrics(), "smsgw_producer_budget_used_units", "smsgw_producer_budget_limit_units")
				if got[`smsgw_producer_budget_used_units{period="daily",producer="notify"}`] != budgetUnits ||
					got[`smsgw_producer_budget_limit_units{period="daily",producer="notify"}`] != budgetUnits {
					t.Errorf("budget metrics %v; want %d used of %d", got, budgetUnits, budgetUnits)
				}
			}

			r := replicas[len(replicas)-1].post("/v1/messages", keyNotify, msg("transactional"))
			p := wantProblem(t, r, http.StatusTooManyRequests, "budget-exhausted", "")
			ra, err := strconv.Atoi(r.header.Get("Retry-After"))
			toMidnight := time.Until(time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour))
			if err != nil || time.Duration(ra)*time.Second < toMidnight-time.Minute || time.Duration(ra)*time.Second > toMidnight+time.Minute {
				t.Errorf("Retry-After %q; want the %s to the next UTC midnight", r.header.Get("Retry-After"), toMidnight.Round(time.Second))
			}
			if r.header.Get("RateLimit-Limit") == "" || r.header.Get("RateLimit-Remaining") == "" {
				t.Errorf("no RateLimit headers: %v", r.header)
			}
			if p["budget_units"] != float64(budgetUnits) || p["used_units"] != float64(budgetUnits) ||
				!strings.Contains(p["detail"].(string), "producers[].budget.daily_units") {
				t.Errorf("problem %v", p)
			}

			// The paused send loop may hold a few messages it took before
			// the pause (sending: 409); the others are queued.
			canceled := 0
			for id, u := range accepted {
				if u != 1 || canceled == 10 {
					continue
				}
				r := replicas[canceled%len(replicas)].do(req{method: http.MethodDelete, path: "/v1/messages/" + id, key: keyNotify})
				if r.status == http.StatusConflict {
					continue
				}
				wantStatus(t, r, http.StatusOK)
				canceled++
			}
			if canceled != 10 {
				t.Fatalf("canceled %d queued one-unit messages; want 10", canceled)
			}
			more := 0
			for i := range 11 {
				r := replicas[i%len(replicas)].post("/v1/messages", keyNotify, msg("transactional"))
				if r.status == http.StatusAccepted {
					more++
					continue
				}
				wantProblem(t, r, http.StatusTooManyRequests, "budget-exhausted", "")
			}
			if more != 10 {
				t.Fatalf("after canceling 10 one-unit messages, %d more were accepted; want exactly 10", more)
			}
		})
	}
}

// TestBudgetAdmission is the budget step of the admission order on both
// executors: a batch accepts the items that fit, in order, each other item
// refused with its own budget-exhausted problem; an OTP is charged at
// accept, gets its units back when the provider refuses it, and is
// refused over the budget with Retry-After to the reset of the budget's
// own time zone.
func TestBudgetAdmission(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, func(c *config.Config) {
				withBudget(5)(c)
				for i := range c.Producers {
					if c.Producers[i].Name == "login" {
						c.Producers[i].Budget = config.BudgetConfig{MonthlyUnits: 1, Timezone: "Asia/Tokyo"}
					}
				}
			})
			two := msg("transactional", "body", twoSegments)
			one := msg("transactional")
			r := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{two, two, two, one, one}})
			wantStatus(t, r, http.StatusOK) // some items accepted, some refused
			var b httpapi.BatchResponse
			r.json(t, &b)
			var got []int
			for _, it := range b.Results {
				got = append(got, it.Status)
			}
			want := []int{http.StatusAccepted, http.StatusAccepted, http.StatusTooManyRequests, http.StatusAccepted, http.StatusTooManyRequests}
			if !slices.Equal(got, want) {
				t.Fatalf("batch item statuses %v; want %v (2+2 units, the third 2 over, 1 fits, then none)", got, want)
			}
			if !strings.Contains(string(r.body), "urn:smsgw:problem:budget-exhausted") {
				t.Errorf("batch refusals are not budget-exhausted: %s", r.body)
			}

			// An OTP that is never sent (the operator's pause holds it
			// past its deadline: 503, nothing sent) gives its unit back;
			// the next is sent, then the month's budget is spent.
			otp := map[string]any{"to": "+819012345678", "body": "Your code is 123456"}
			wantStatus(t, h.post("/v1/admin/pause", keyAdmin, nil), http.StatusOK)
			r = h.post("/v1/otp", keyLogin, otp)
			if p := wantProblem(t, r, http.StatusServiceUnavailable, "unavailable", ""); !strings.Contains(p["detail"].(string), "paused") {
				t.Fatalf("paused OTP: %v", p)
			}
			wantStatus(t, h.post("/v1/admin/resume", keyAdmin, nil), http.StatusOK)
			var sent reply
			eventually(t, "the resume", func() bool { // each OTP still paused gives its unit back too
				sent = h.post("/v1/otp", keyLogin, otp)
				return sent.status != http.StatusServiceUnavailable
			})
			wantStatus(t, sent, http.StatusOK)
			r = h.post("/v1/otp", keyLogin, otp)
			p := wantProblem(t, r, http.StatusTooManyRequests, "budget-exhausted", "")
			if p["period"] != "monthly" {
				t.Errorf("OTP refusal %v; want the monthly period", p)
			}
			tokyo, _ := time.LoadLocation("Asia/Tokyo")
			now := time.Now().In(tokyo)
			reset := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, tokyo)
			if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || (time.Until(reset)-time.Duration(ra)*time.Second).Abs() > time.Minute {
				t.Errorf("Retry-After %q; want the time to %s", r.header.Get("Retry-After"), reset)
			}
		})
	}
}
