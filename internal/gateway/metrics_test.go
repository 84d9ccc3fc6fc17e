package gateway

import (
	"crypto/rand"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/httpapi/usageapi"
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

// metricValues picks the samples of the named metrics (name{labels} →
// value) out of a Prometheus text exposition.
func metricValues(text string, names ...string) map[string]float64 {
	out := map[string]float64{}
	for _, l := range strings.Split(text, "\n") {
		series, rest, ok := strings.Cut(l, " ")
		if !ok || strings.HasPrefix(l, "#") {
			continue
		}
		name, _, _ := strings.Cut(series, "{")
		for _, n := range names {
			if n == name {
				if v, err := strconv.ParseFloat(rest, 64); err == nil {
					out[series] = v
				}
			}
		}
	}
	return out
}

// TestConfigMetrics: the configured limits are on /metrics as configured
// (not the defaults), and smsgw_admin_paused follows the operator pause.
func TestConfigMetrics(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, func(c *config.Config) {
			c.Provider.ContractRPS = 120
			c.Limits.TargetRPS = 80
			c.Limits.Classes = map[string]config.ClassLimits{"marketing": {MaxRPS: 50}, "transactional": {MaxRPS: 60}}
			c.Dispatch.SuspensionGuard.Threshold = 200
			c.Messages.OTPDeadline = 2 * time.Second
			c.Messages.DefaultTTL = time.Hour
		})
		scrape := func() map[string]float64 {
			return metricValues(string(h.get("/metrics", "").body), "smsgw_config_contract_rate_per_second",
				"smsgw_config_target_rate_per_second", "smsgw_config_class_max_rate_per_second",
				"smsgw_config_suspension_threshold_throttles", "smsgw_config_otp_deadline_seconds",
				"smsgw_config_default_ttl_seconds", "smsgw_admin_paused")
		}
		want := map[string]float64{
			"smsgw_config_contract_rate_per_second":                         120,
			"smsgw_config_target_rate_per_second":                           80,
			`smsgw_config_class_max_rate_per_second{class="marketing"}`:     50,
			`smsgw_config_class_max_rate_per_second{class="transactional"}`: 60,
			`smsgw_config_class_max_rate_per_second{class="otp"}`:           80, // uncapped: the target
			"smsgw_config_suspension_threshold_throttles":                   200,
			"smsgw_config_otp_deadline_seconds":                             2,
			"smsgw_config_default_ttl_seconds":                              3600,
			"smsgw_admin_paused":                                            0,
		}
		got := scrape()
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
			}
		}
		if len(got) != len(want) {
			t.Errorf("series %v, want exactly %d", got, len(want))
		}
		wantStatus(t, h.post("/v1/admin/pause", keyAdmin, nil), http.StatusOK)
		if v := scrape()["smsgw_admin_paused"]; v != 1 {
			t.Errorf("smsgw_admin_paused = %v while paused", v)
		}
		wantStatus(t, h.post("/v1/admin/resume", keyAdmin, nil), http.StatusOK)
		if v := scrape()["smsgw_admin_paused"]; v != 0 {
			t.Errorf("smsgw_admin_paused = %v after resume", v)
		}
	})
}

// TestMetricLabelsBounded: requests with made-up methods, paths and
// headers add no series to /metrics; the methods are counted as "other".
func TestMetricLabelsBounded(t *testing.T) {
	h := start(t, embeddedMode, nil)
	before := metricValues(h.metrics(), "smsgw_http_requests_total", "smsgw_http_request_duration_seconds_count")
	const n = 30
	for i := range n {
		method := "X" + strings.ToUpper(rand.Text()) + strings.Repeat("Z", 1000)
		path := []string{"/v1/messages", "/nope/" + rand.Text(), "/metrics", "/v1/admin/" + rand.Text()}[i%4]
		hr, err := http.NewRequestWithContext(t.Context(), method, h.base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set("X-Request-Id", rand.Text())
		resp, err := h.client.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	after := metricValues(h.metrics(), "smsgw_http_requests_total", "smsgw_http_request_duration_seconds_count")
	standard := regexp.MustCompile(`method="(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS|CONNECT|TRACE|other)"`)
	others := 0.0
	for series, v := range after {
		if strings.Contains(series, "method=") && !standard.MatchString(series) {
			t.Errorf("a series for a request's own method: %.80s...", series)
		}
		if strings.Contains(series, `method="other"`) {
			others += v
		}
		if len(series) > 200 {
			t.Errorf("a series label longer than any route: %.80s...", series)
		}
	}
	if others != n {
		t.Errorf("method=\"other\" counted %v requests, want %d", others, n)
	}
	if grew := len(after) - len(before); grew > 8 {
		t.Errorf("%d requests added %d series", n, grew)
	}
}

// TestUsageThroughHTTP: a known mix — two classes of one producer, two
// countries, a 2-segment message, a canceled one, an OTP of the fast path
// from another producer — sent through the simulator; once every message
// is final, GET /v1/usage answers each producer exactly its own counts,
// GET /v1/admin/usage both, and smsgw_producer_units_total the units.
func TestUsageThroughHTTP(t *testing.T) {
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			t.Parallel()
			h := start(t, m, nil)
			today := time.Now().UTC().Format("2006-01-02")
			var ids []string
			send := func(body map[string]any) string {
				var a httpapi.AcceptedMessage
				r := h.post("/v1/messages", keyNotify, body)
				wantStatus(t, r, http.StatusAccepted)
				r.json(t, &a)
				ids = append(ids, a.ID)
				return a.ID
			}
			// the OTP first: the queued sends below do not take its slot
			wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
			send(msg("transactional"))
			send(msg("transactional"))
			long := strings.Repeat("Your parcel arrives today. ", 7) // 189 GSM-7 characters: 2 segments
			send(msg("marketing", "to", "+33612345678", "body", long))
			later := send(msg("marketing", "send_at", time.Now().Add(time.Hour).Format(time.RFC3339)))
			wantStatus(t, h.do(req{method: http.MethodDelete, path: "/v1/messages/" + later, key: keyNotify}), http.StatusOK)
			eventually(t, "every message final", func() bool {
				for _, id := range ids {
					var v httpapi.MessageView
					r := h.get("/v1/messages/"+id, keyNotify)
					r.json(t, &v)
					if !v.Status.Done() {
						return false
					}
				}
				return true
			})
			sent := func(n, u int64) map[string]usageapi.Counts {
				return map[string]usageapi.Counts{"sent": {Messages: n, Units: u}}
			}
			notify := []usageapi.Row{
				{Day: today, Producer: "notify", Class: "transactional", Country: "JP", Accepted: usageapi.Counts{Messages: 2, Units: 2}, Final: sent(2, 2)},
				{Day: today, Producer: "notify", Class: "marketing", Country: "FR", Accepted: usageapi.Counts{Messages: 1, Units: 2}, Final: sent(1, 2)},
				{Day: today, Producer: "notify", Class: "marketing", Country: "JP", Accepted: usageapi.Counts{Messages: 1, Units: 1},
					Final: map[string]usageapi.Counts{"canceled": {Messages: 1, Units: 1}}},
			}
			login := []usageapi.Row{
				{Day: today, Producer: "login", Class: "otp", Country: "JP", Accepted: usageapi.Counts{Messages: 1, Units: 1}, Final: sent(1, 1)},
			}
			usage := func(path, key string) []usageapi.Row {
				t.Helper()
				r := h.get(path, key)
				wantStatus(t, r, http.StatusOK)
				var a usageapi.Answer
				r.json(t, &a)
				if a.To > today || a.From > a.To {
					t.Errorf("%s: from %s to %s, want a range up to %s", path, a.From, a.To, today)
				}
				return a.Rows
			}
			wantRows(t, "notify's own", usage("/v1/usage", keyNotify), notify)
			wantRows(t, "login's own", usage("/v1/usage?from="+today+"&to="+today, keyLogin), login)
			wantRows(t, "the admin view", usage("/v1/admin/usage", keyAdmin), append(login, notify...))
			wantRows(t, "an earlier day", usage("/v1/usage?to=2000-01-01", keyNotify), nil)

			wantStatus(t, h.get("/v1/admin/usage", keyNotify), http.StatusForbidden)
			for _, bad := range []struct{ query, field string }{
				{"from=2026-13-01", "from"}, {"to=yesterday", "to"}, {"from=" + today + "&to=2000-01-01", "from"},
			} {
				r := h.get("/v1/usage?"+bad.query, keyNotify)
				wantStatus(t, r, http.StatusBadRequest)
				if f := r.fields(t); len(f) != 1 || f[0] != bad.field {
					t.Errorf("?%s: problem fields %v, want [%s]", bad.query, f, bad.field)
				}
			}

			got := metricValues(string(h.get("/metrics", "").body), "smsgw_producer_units_total")
			want := map[string]float64{
				`smsgw_producer_units_total{class="transactional",producer="notify"}`: 2,
				`smsgw_producer_units_total{class="marketing",producer="notify"}`:     3,
				`smsgw_producer_units_total{class="otp",producer="login"}`:            1,
				`smsgw_producer_units_total{class="transactional",producer="slow"}`:   0,
			}
			for series, v := range want {
				if got[series] != v {
					t.Errorf("%s = %v, want %v (all: %v)", series, got[series], v, got)
				}
			}
		})
	}
}

func wantRows(t *testing.T, what string, got, want []usageapi.Row) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows %+v, want %+v", what, len(got), got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		same := g.Day == w.Day && g.Producer == w.Producer && g.Class == w.Class && g.Country == w.Country &&
			g.Accepted == w.Accepted && len(g.Final) == len(w.Final)
		for st, c := range w.Final {
			same = same && g.Final[st] == c
		}
		if !same {
			t.Errorf("%s: row %d %+v, want %+v", what, i, g, w)
		}
	}
}
