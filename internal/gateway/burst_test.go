package gateway

import (
	"net/http"
	"strings"
	"testing"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/sms"
)

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
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
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
