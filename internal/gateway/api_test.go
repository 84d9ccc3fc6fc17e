package gateway

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"smsgw/api"
	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/opsview"
	"smsgw/internal/sms"
)

// TestRoutesMatchSpec fails when a chi route and a path of
// api/openapi.yaml differ, in either direction.
func TestRoutesMatchSpec(t *testing.T) {
	h := start(t, embeddedMode, nil)
	var routes []string
	err := chi.Walk(h.app.Handler().(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes = append(routes, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := specDoc()
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			paths = append(paths, method+" "+path)
		}
	}
	sort.Strings(routes)
	sort.Strings(paths)
	if !slices.Equal(routes, paths) {
		t.Errorf("chi routes and api/openapi.yaml differ:\n routes: %v\n spec:   %v", routes, paths)
	}
}

func TestPostMessageQueuesAndSends(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, nil)
		before := time.Now()
		r := h.post("/v1/messages", keyNotify, msg("transactional", "reference", "order-17", "from", "Shop"))
		wantStatus(t, r, http.StatusAccepted)
		var a httpapi.AcceptedMessage
		r.json(t, &a)
		if !sms.ValidID(a.ID) || a.Status != sms.StatusQueued || a.Class != sms.ClassTransactional || a.Segments != 1 || a.Encoding != "GSM-7" {
			t.Fatalf("accepted %+v", a)
		}
		if loc := r.header.Get("Location"); loc != "/v1/messages/"+a.ID {
			t.Errorf("Location %q", loc)
		}
		if a.EstimatedSendAt.Before(before.Add(-time.Second)) || a.EstimatedSendAt.After(time.Now().Add(5*time.Second)) {
			t.Errorf("estimated_send_at %v is not about now", a.EstimatedSendAt)
		}
		if r.header.Get("RateLimit-Limit") != "5000" || r.header.Get("RateLimit-Remaining") == "" {
			t.Errorf("RateLimit headers %v", r.header)
		}
		eventually(t, "the simulator to receive the message", func() bool { return sentRefs(h.sim)[a.ID] == 1 })
		var v httpapi.MessageView
		eventually(t, "status sent", func() bool {
			g := h.get("/v1/messages/"+a.ID, keyNotify)
			wantStatus(t, g, http.StatusOK)
			g.json(t, &v)
			return v.Status == sms.StatusSent
		})
		// Final: the number masked, no body kept.
		if v.To != "+8190****5678" || v.From != "Shop" || v.Reference != "order-17" || v.ProviderMessageID == "" ||
			v.SentAt == nil || v.Segments != 1 {
			t.Errorf("status %+v", v)
		}
	})
}

func TestGetMessageOnlyOwn(t *testing.T) {
	h := start(t, embeddedMode, nil)
	r := h.post("/v1/messages", keyNotify, msg("transactional"))
	wantStatus(t, r, http.StatusAccepted)
	var a httpapi.AcceptedMessage
	r.json(t, &a)
	other := h.get("/v1/messages/"+a.ID, keySlow)
	wantStatus(t, other, http.StatusNotFound)
	missing := h.get("/v1/messages/"+sms.NewID(time.Now()), keyNotify)
	wantStatus(t, missing, http.StatusNotFound)
	if other.problem(t)["detail"] != missing.problem(t)["detail"] {
		t.Errorf("another producer's id is distinguishable from a missing one: %s vs %s", other.body, missing.body)
	}
	wantStatus(t, h.get("/v1/messages/not-an-id", keyNotify), http.StatusNotFound)
}

func TestAuth(t *testing.T) {
	h := start(t, embeddedMode, nil)
	for _, tc := range []struct {
		name   string
		r      req
		status int
	}{
		{"no key", req{method: "POST", path: "/v1/messages", body: msg("transactional")}, 401},
		{"unknown key", req{method: "POST", path: "/v1/messages", key: "nope-nope-nope-nope", body: msg("transactional")}, 401},
		{"basic auth", req{method: "POST", path: "/v1/messages", body: msg("transactional"), header: map[string]string{"Authorization": "Basic " + keyNotify}}, 401},
		{"marketing key asks otp", req{method: "POST", path: "/v1/messages", key: keyNotify, body: msg("otp")}, 403},
		{"otp key asks marketing", req{method: "POST", path: "/v1/messages", key: keyLogin, body: msg("marketing")}, 403},
		{"marketing key on otp fast path", req{method: "POST", path: "/v1/otp", key: keyNotify, body: map[string]any{"to": "+819012345678", "body": "123456"}}, 403},
		{"producer key on admin", req{method: "GET", path: "/v1/admin/stats", key: keyNotify}, 403},
		{"admin key on producer API", req{method: "POST", path: "/v1/messages", key: keyAdmin, body: msg("transactional")}, 401},
		{"admin key", req{method: "GET", path: "/v1/admin/stats", key: keyAdmin}, 200},
		{"health needs no key", req{method: "GET", path: "/healthz"}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := h.with(t)
			r := h.do(tc.r)
			wantStatus(t, r, tc.status)
			if tc.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	stats := h.get("/v1/admin/stats", keyAdmin)
	var st opsview.StatsResponse
	stats.json(t, &st)
	for _, c := range sms.Classes {
		if n := st.Classes[c.String()].Ready + st.Classes[c.String()].Leased; n != 0 {
			t.Errorf("a refused request queued %d %s messages", n, c)
		}
	}
}

func TestValidation(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) { c.Messages.MaxSegments = 2 })
	long := strings.Repeat("a", 153*2+1)
	for _, tc := range []struct {
		name   string
		body   any
		ct     string
		status int
		field  string
	}{
		{"to not E.164", msg("transactional", "to", "09012345678"), "", 400, "to"},
		{"to with spaces", msg("transactional", "to", "+81 90 1234 5678"), "", 400, "to"},
		{"to not a valid number", msg("transactional", "to", "+8100000000"), "", 400, "to"},
		{"to missing", map[string]any{"body": "x", "class": "transactional"}, "", 400, "to"},
		{"from punctuation", msg("transactional", "from", "Shop!"), "", 400, "from"},
		{"from too long", msg("transactional", "from", "ABCDEFGHIJKL"), "", 400, "from"},
		{"body empty", msg("transactional", "body", ""), "", 400, "body"},
		{"body NUL", msg("transactional", "body", "a\x00b"), "", 400, "body"},
		{"body tab", msg("transactional", "body", "a\tb"), "", 400, "body"},
		{"body too many segments", msg("transactional", "body", long), "", 400, "body"},
		{"body invalid UTF-8", `{"to":"+819012345678","class":"transactional","body":"a` + "\xff" + `b"}`, "", 400, "body"},
		{"body lone surrogate", `{"to":"+819012345678","class":"transactional","body":"a\ud800b"}`, "", 400, "body"},
		{"class unknown", msg("bulk"), "", 400, "class"},
		{"class missing", map[string]any{"to": "+819012345678", "body": "x"}, "", 400, "class"},
		{"class wrong type", msg("transactional", "class", 3), "", 400, "class"},
		{"ttl zero", msg("transactional", "ttl_seconds", 0), "", 400, "ttl_seconds"},
		{"ttl over max", msg("transactional", "ttl_seconds", 73*3600), "", 400, "ttl_seconds"},
		{"ttl not integer", msg("transactional", "ttl_seconds", 1.5), "", 400, "ttl_seconds"},
		{"reference too long", msg("transactional", "reference", strings.Repeat("r", 129)), "", 400, "reference"},
		{"unknown field", msg("transactional", "priority", "high"), "", 400, "priority"},
		{"not JSON", `to=+819012345678`, "", 400, "request"},
		{"array", `[]`, "", 400, "request"},
		{"trailing data", `{"to":"+819012345678","body":"x","class":"transactional"} {}`, "", 400, "request"},
		{"form content type", msg("transactional"), "application/x-www-form-urlencoded", 415, ""},
		{"latin1 charset", msg("transactional"), "application/json; charset=iso-8859-1", 415, ""},
		{"too large chunked", io.MultiReader(strings.NewReader(`{"to":"+819012345678","class":"transactional","body":"`), strings.NewReader(strings.Repeat("a", 1<<20)+`"}`)), "", 413, ""},
		{"too large", `{"to":"+819012345678","class":"transactional","body":"` + strings.Repeat("a", 1<<20) + `"}`, "", 413, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := req{method: "POST", path: "/v1/messages", key: keyNotify, body: tc.body}
			if tc.ct != "" {
				r.header = map[string]string{"Content-Type": tc.ct}
			}
			res := h.with(t).do(r)
			wantStatus(t, res, tc.status)
			p := res.problem(t)
			if p["status"] != float64(tc.status) || !strings.HasPrefix(p["type"].(string), httpapi.ProblemTypeBase) || p["title"] == "" {
				t.Errorf("problem %v", p)
			}
			if tc.field != "" && !slices.Contains(res.fields(t), tc.field) {
				t.Errorf("errors name %v, want %q; body %s", res.fields(t), tc.field, res.body)
			}
		})
	}
}

func TestSegmentsAndEncoding(t *testing.T) {
	h := start(t, embeddedMode, nil)
	for _, tc := range []struct {
		body     string
		segments int
		encoding string
	}{
		{strings.Repeat("a", 160), 1, "GSM-7"},
		{strings.Repeat("a", 161), 2, "GSM-7"},
		{strings.Repeat("€", 80), 1, "GSM-7"},
		{strings.Repeat("あ", 70), 1, "UCS-2"},
		{strings.Repeat("あ", 71), 2, "UCS-2"},
	} {
		r := h.post("/v1/messages", keyNotify, msg("marketing", "body", tc.body))
		wantStatus(t, r, http.StatusAccepted)
		var a httpapi.AcceptedMessage
		r.json(t, &a)
		if a.Segments != tc.segments || a.Encoding != tc.encoding {
			t.Errorf("%q…: %d %s, want %d %s", tc.body[:6], a.Segments, a.Encoding, tc.segments, tc.encoding)
		}
	}
}

func TestOpenAPIAndMetricsServed(t *testing.T) {
	h := start(t, embeddedMode, nil)
	r := h.get("/openapi.yaml", "")
	wantStatus(t, r, http.StatusOK)
	if string(r.body) != string(api.OpenAPI) {
		t.Error("/openapi.yaml differs from api/openapi.yaml")
	}
	wantStatus(t, h.post("/v1/messages", keyNotify, msg("marketing")), http.StatusAccepted)
	m := h.get("/metrics", "")
	wantStatus(t, m, http.StatusOK)
	for _, want := range []string{
		`smsgw_api_accepted_total{class="marketing"} 1`,
		`smsgw_api_rejections_total{kind="rate-limited"} 0`,
		`smsgw_http_requests_total{code="202",method="POST",route="/v1/messages"} 1`,
		"go_goroutines", "process_cpu_seconds_total",
	} {
		if !strings.Contains(string(m.body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(string(m.body), "+8190") {
		t.Error("a phone number in /metrics")
	}
	if id := r.header.Get("X-Request-Id"); id == "" {
		t.Error("no X-Request-Id")
	}
	nf := h.get("/nope", "")
	wantStatus(t, nf, http.StatusNotFound)
	nf.problem(t)
	na := h.do(req{method: "DELETE", path: "/v1/messages", key: keyNotify})
	wantStatus(t, na, http.StatusMethodNotAllowed)
}

// recorder is a testing.TB that records errors instead of failing.
type recorder struct {
	testing.TB
	failed []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...) }

func (r *recorder) Helper() {}

// TestSpecCheckCanFail proves checkSpec rejects answers that break the
// contract, so the handler tests' validation means something.
func TestSpecCheckCanFail(t *testing.T) {
	hr, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://127.0.0.1:1/v1/messages", nil)
	json := http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/messages/x"}, "X-Request-Id": {"r1"}}
	undeclared := http.Header{"Content-Type": {"application/json"}, "Location": {"/v1/messages/x"}, "X-Request-Id": {"r1"}, "Retry-After": {"1"}}
	problem := http.Header{"Content-Type": {"application/problem+json"}}
	for _, tc := range []struct {
		name string
		r    reply
		ok   bool
	}{
		{"valid 202", reply{202, json, []byte(`{"id":"msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA","status":"queued","class":"otp","segments":1,"encoding":"GSM-7","estimated_send_at":"2026-01-01T00:00:00Z"}`)}, true},
		{"202 with a header the spec does not declare on it", reply{202, undeclared, []byte(`{"id":"msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA","status":"queued","class":"otp","segments":1,"encoding":"GSM-7","estimated_send_at":"2026-01-01T00:00:00Z"}`)}, false},
		{"202 without X-Request-Id", reply{202, http.Header{"Content-Type": {"application/json"}}, []byte(`{"id":"msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA","status":"queued","class":"otp","segments":1,"encoding":"GSM-7","estimated_send_at":"2026-01-01T00:00:00Z"}`)}, false},
		{"202 without id", reply{202, json, []byte(`{"status":"queued","class":"otp","segments":1,"encoding":"GSM-7","estimated_send_at":"2026-01-01T00:00:00Z"}`)}, false},
		{"202 with unknown class", reply{202, json, []byte(`{"id":"msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA","status":"queued","class":"bulk","segments":1,"encoding":"GSM-7","estimated_send_at":"2026-01-01T00:00:00Z"}`)}, false},
		{"undocumented status", reply{418, problem, []byte(`{"type":"urn:smsgw:problem:internal","title":"x","status":418}`)}, false},
		{"429 without Retry-After", reply{429, problem, []byte(`{"type":"urn:smsgw:problem:rate-limited","title":"x","status":429}`)}, false},
		{"429 with Retry-After", reply{429, http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"1"}, "X-Request-Id": {"r1"}}, []byte(`{"type":"urn:smsgw:problem:rate-limited","title":"x","status":429}`)}, true},
		{"429 of an unknown type", reply{429, http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"1"}}, []byte(`{"type":"urn:smsgw:problem:slow-down","title":"x","status":429}`)}, false},
		{"202 scheduled", reply{202, json, []byte(`{"id":"msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA","status":"scheduled","class":"otp","segments":1,"encoding":"GSM-7","estimated_send_at":"2026-01-01T00:00:00Z","send_at":"2026-01-01T00:00:00Z"}`)}, true},
	} {
		rec := &recorder{TB: t}
		checkSpec(rec, hr, tc.r)
		if ok := len(rec.failed) == 0; ok != tc.ok {
			t.Errorf("%s: valid=%v, want %v (%v)", tc.name, ok, tc.ok, rec.failed)
		}
	}
}
