package gateway

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// /metrics reports the queue's depth per class and state, read from the
// real store at scrape time.
func TestQueueDepthMetrics(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			h := start(t, m, nil)
			wantStatus(t, h.post("/v1/admin/pause", keyAdmin, map[string]any{"reason": "hold the queue"}), http.StatusOK)
			for range 3 {
				wantStatus(t, h.post("/v1/messages", keyNotify, msg("marketing")), http.StatusAccepted)
			}
			var last map[string]float64
			eventually(t, "3 marketing messages queued on /metrics", func() bool {
				last = queueSeries(string(h.get("/metrics", "").body))
				held := last[`class="marketing",state="ready"`] + last[`class="marketing",state="leased"`]
				return held == 3 && last[`class="otp",state="ready"`] == 0 && last["up"] == 1
			})
		})
	}
}

// queueSeries picks the smsgw_queue_messages series (by label set) and
// smsgw_queue_stats_up ("up") out of a Prometheus text exposition.
func queueSeries(text string) map[string]float64 {
	out := map[string]float64{}
	for _, l := range strings.Split(text, "\n") {
		name, rest, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(rest, 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(name, "smsgw_queue_messages{"):
			out[strings.TrimSuffix(strings.TrimPrefix(name, "smsgw_queue_messages{"), "}")] = v
		case name == "smsgw_queue_stats_up":
			out["up"] = v
		}
	}
	return out
}
