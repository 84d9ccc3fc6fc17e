package gateway

import (
	"net/http"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/opsview"
)

// TestSenderLaneETA: a message of a 1/s sender behind 30 queued messages
// of that sender is estimated about 30 s out (and refused up front with a
// TTL shorter than that), while a message of another sender of the same
// class is estimated by the class's backlog alone; the stats answer lists
// the sender's lane with its backlog.
func TestSenderLaneETA(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, func(c *config.Config) {
			c.Limits.TargetRPS = 10
			c.Limits.MaxSenders = 2
			c.Limits.Classes = map[string]config.ClassLimits{"marketing": {MaxRPS: 5}}
			c.Limits.Senders = map[string]config.SenderLimits{"SlowCo": {MaxRPS: 1}}
		})
		wantStatus(t, h.post("/v1/admin/pause", keyAdmin, map[string]any{"reason": "build a backlog"}), http.StatusOK)
		items := make([]any, 30)
		for i := range items {
			items[i] = msg("marketing", "from", "SlowCo")
		}
		wantStatus(t, h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": items}), http.StatusOK)
		var lanes []opsview.SenderLane
		eventually(t, "the sender's lane in the stats", func() bool {
			var st opsview.StatsResponse
			r := h.get("/v1/admin/stats", keyAdmin)
			wantStatus(t, r, http.StatusOK)
			r.json(t, &st)
			lanes = st.SenderLanes
			mkt := st.Classes["marketing"]
			// the send loop may hold a batch taken before the pause: in
			// flight, out of the lane
			return len(lanes) == 2 && mkt.Ready+mkt.Leased == 30 && lanes[0].Backlog != nil && *lanes[0].Backlog == mkt.Ready
		})
		if l := lanes[0]; l.Sender != "SlowCo" || l.MaxRPS == nil || *l.MaxRPS != 1 || *l.Backlog < 20 || l.OldestSeconds == nil {
			t.Errorf("sender_lanes[0] = %+v, want SlowCo at 1/s with its backlog", l)
		}
		if l := lanes[1]; l.Sender != opsview.SenderLaneOther || l.MaxRPS != nil || l.Backlog == nil || *l.Backlog != 0 {
			t.Errorf("sender_lanes[1] = %+v, want other, empty", l)
		}

		eta := func(from string) time.Duration {
			t.Helper()
			r := h.post("/v1/messages", keyNotify, msg("marketing", "from", from, "ttl_seconds", 120))
			wantStatus(t, r, http.StatusAccepted)
			var a httpapi.AcceptedMessage
			r.json(t, &a)
			return time.Until(a.EstimatedSendAt)
		}
		if wait := eta("SlowCo"); wait < 24*time.Second || wait > 34*time.Second {
			t.Errorf("SlowCo's message estimated in %v, want about 30 s (its 30 queued at 1/s)", wait)
		}
		// the class's 31 queued at marketing's 5/s: about 6 s
		if wait := eta("OtherCo"); wait < 4*time.Second || wait > 10*time.Second {
			t.Errorf("OtherCo's message estimated in %v, want about 6 s (the class's backlog alone)", wait)
		}
		r := h.post("/v1/messages", keyNotify, msg("marketing", "from", "SlowCo", "ttl_seconds", 15))
		wantStatus(t, r, http.StatusTooManyRequests)
		if p := r.problem(t); p["type"] != httpapi.ProblemTypeBase+"would-expire-before-send" {
			t.Errorf("problem %v", p)
		}
	})
}
