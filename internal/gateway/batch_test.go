package gateway

import (
	"net/http"
	"strings"
	"testing"

	"smsgw/internal/httpapi"
)

func TestBatch(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
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
