package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"smsgw/internal/httpapi"
	"smsgw/internal/httpapi/usageapi"
)

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
