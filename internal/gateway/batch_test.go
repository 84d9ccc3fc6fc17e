package gateway

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

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
