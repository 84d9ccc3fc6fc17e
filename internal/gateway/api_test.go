package gateway

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"smsgw/api"
	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/httpapi/auththrottle"
	"smsgw/internal/opsview"
	"smsgw/internal/provider/sim"
	"smsgw/internal/redistest"
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
		h.pollOK(t, "status sent", "/v1/messages/"+a.ID, keyNotify, &v, func() bool { return v.Status == sms.StatusSent })
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

// TestUnicodeControlsRefused: a body with a
// bidirectional or zero-width character is a 400 naming body and the
// character's code point, unless the producer allows them.
func TestUnicodeControlsRefused(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) {
		c.Producers[0].AllowUnicodeControls = true // notify
	})
	for _, tc := range []struct{ name, body, point string }{
		{"right-to-left override", "Pay to \u202eKCAB\u202c now", "U+202E"},
		{"zero-width space", "Your code is 12\u200b34", "U+200B"},
		{"byte order mark", "\ufeffhello", "U+FEFF"},
		{"isolate", "a \u2067b\u2069 c", "U+2067"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := h.with(t)
			for _, r := range []reply{
				h.post("/v1/messages", keySlow, msg("transactional", "body", tc.body)),
				h.post("/v1/otp", keyLogin, otpBody("body", tc.body)),
			} {
				wantStatus(t, r, http.StatusBadRequest)
				if f := r.fields(t); !slices.Contains(f, "body") || !strings.Contains(string(r.body), tc.point) {
					t.Errorf("errors %v, body %s; want body named with %s", f, r.body, tc.point)
				}
			}
			wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional", "body", tc.body)), http.StatusAccepted)
		})
	}
	wantStatus(t, h.post("/v1/messages", keySlow, msg("transactional", "body", "Grüße, 你好 👋")), http.StatusAccepted)
}

// TestDuplicateKeysRefused: a member named twice, or
// named in another case than the contract's ("TO" for "to"), is a 400
// naming it; encoding/json would take the last one, or match the name
// case-insensitively, so a validator in front of us could read another
// number than the one we send to.
func TestDuplicateKeysRefused(t *testing.T) {
	h := start(t, embeddedMode, nil)
	const ok = `"body":"hi","class":"transactional"`
	for _, tc := range []struct {
		name, path, key, body, field string
	}{
		{"duplicate to", "/v1/messages", keyNotify, `{"to":"+819012345678","to":"+819087654321",` + ok + `}`, "to"},
		{"case variant", "/v1/messages", keyNotify, `{"to":"+819012345678","TO":"+819087654321",` + ok + `}`, "TO"},
		{"case variant alone", "/v1/messages", keyNotify, `{"To":"+819012345678",` + ok + `}`, "To"},
		{"duplicate body", "/v1/messages", keyNotify, `{"to":"+819012345678","body":"a",` + ok + `}`, "body"},
		{"otp duplicate", "/v1/otp", keyLogin, `{"to":"+819012345678","body":"123456","to":"+819087654321"}`, "to"},
		{"otp case variant", "/v1/otp", keyLogin, `{"to":"+819012345678","Body":"1","body":"123456"}`, "Body"},
		{"batch messages twice", "/v1/messages/batch", keyNotify,
			`{"messages":[{"to":"+819012345678",` + ok + `}],"messages":[]}`, "messages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.with(t).post(tc.path, tc.key, tc.body)
			wantStatus(t, r, http.StatusBadRequest)
			if f := r.fields(t); !slices.Contains(f, tc.field) {
				t.Errorf("errors name %v, want %q", f, tc.field)
			}
		})
	}
	r := h.post("/v1/messages/batch", keyNotify, `{"messages":[{"to":"+819012345678","To":"+819087654321",`+ok+`}]}`)
	wantStatus(t, r, http.StatusOK)
	var b httpapi.BatchResponse
	r.json(t, &b)
	if b.Rejected != 1 || b.Results[0].Status != http.StatusBadRequest || b.Results[0].Error.Errors[0].Field != "messages[0].To" {
		t.Errorf("batch item with a case variant: %s", r.body)
	}
	if len(sentRefs(h.sim)) != 0 {
		t.Error("a refused request reached the provider")
	}
}

// TestReferenceRefusesInvisibleCharacters: a reference with a
// bidirectional or zero-width character is refused as a body with one is
// (the same check), on every route that takes one, and whatever the
// producer's allow_unicode_controls.
func TestReferenceRefusesInvisibleCharacters(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) {
		c.Producers[0].AllowUnicodeControls = true // notify
	})
	for _, tc := range []struct{ name, ref, point string }{
		{"right-to-left override", "order-\u202e4321", "U+202E"},
		{"zero-width space", "order\u200b1234", "U+200B"},
		{"isolate", "a\u2067b\u2069", "U+2067"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := h.with(t)
			for _, r := range []struct {
				reply
				field string
			}{
				{h.post("/v1/messages", keyNotify, msg("transactional", "reference", tc.ref)), "reference"},
				{h.post("/v1/otp", keyLogin, otpBody("reference", tc.ref)), "reference"},
			} {
				wantStatus(t, r.reply, http.StatusBadRequest)
				if f := r.fields(t); !slices.Contains(f, r.field) || !strings.Contains(string(r.body), tc.point) {
					t.Errorf("fields %v, body %s; want %s named with %s", f, r.body, r.field, tc.point)
				}
			}
			b := h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{msg("transactional", "reference", tc.ref)}})
			wantStatus(t, b, http.StatusOK)
			var out httpapi.BatchResponse
			b.json(t, &out)
			if out.Rejected != 1 || !strings.Contains(string(b.body), "messages[0].reference") {
				t.Errorf("batch: %s; want the item refused naming messages[0].reference", b.body)
			}
		})
	}
	wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional", "reference", "Bestellung-ä-你好")), http.StatusAccepted)
}

// TestUnauthenticatedProbesSampledInLogs: with Redis down, /readyz and
// /metrics (no key) write one WARN line each per 10 s with a count, not
// one per request.
func TestUnauthenticatedProbesSampledInLogs(t *testing.T) {
	srv := redistest.StartServer(t, redistest.ServerOptions{})
	h := start(t, redisMode, func(c *config.Config) { c.Redis.Addr = srv.Addr })
	srv.Kill()
	const n = 10 // a line per request would be 10 of each
	began := time.Now()
	for range n {
		wantStatus(t, h.get("/readyz", ""), http.StatusServiceUnavailable)
		if r := h.get("/metrics", ""); r.status != http.StatusOK {
			t.Fatalf("/metrics: %d", r.status)
		}
	}
	lines := map[string]int{}
	for l := range strings.SplitSeq(h.logs.String(), "\n") {
		if !strings.Contains(l, `"level":"WARN"`) {
			continue
		}
		for _, m := range []string{"readiness checks failed", "metrics: queue stats", "metrics: outbox stats"} {
			if strings.Contains(l, m) {
				lines[m]++
			}
		}
	}
	if lines["readiness checks failed"] == 0 || lines["metrics: queue stats"] == 0 {
		t.Fatalf("WARN lines %v; want the failures logged", lines)
	}
	most := 2 + int(time.Since(began)/(10*time.Second)) // one per 10 s begun
	for m, c := range lines {
		if c > most || c >= n {
			t.Errorf("%d WARN lines %q for %d requests in %s; want at most %d", c, m, n, time.Since(began), most)
		}
	}
}

// FuzzDecodeMessage sends arbitrary bytes to the producer endpoints through
// the real handler chain of a running App (embedded store, simulator):
// never a panic, never a 5xx (but an OTP's 503 when its deadline passed), and
// every 4xx is a problem+json.
func FuzzDecodeMessage(f *testing.F) {
	for _, seed := range []string{
		`{"to":"+819012345678","body":"hello","class":"marketing"}`,
		`{"to":"+819012345678","body":"hello","class":"transactional","ttl_seconds":60,"reference":"r","from":"Shop"}`,
		`{"messages":[{"to":"+819012345678","body":"a","class":"marketing"},{"to":"x"}]}`,
		`{"to":"+819012345678","body":"123456","deadline_ms":500}`,
		`{"to":"+819012345678","body":"a\ud800","class":"marketing"}`,
		"{\"to\":\"+819012345678\",\"body\":\"\xff\",\"class\":\"marketing\"}",
		`{"to":1e999,"body":null,"class":[]}`,
		`{"messages":null}`, `[]`, `null`, ``, `{`, `{"a":{"b":{"c":[[[[[]]]]]}}}`,
	} {
		for ep := range 3 {
			f.Add(uint8(ep), []byte(seed))
		}
	}
	h := start(f, embeddedMode, nil)
	handler := h.app.Handler()
	paths := []string{"/v1/messages", "/v1/messages/batch", "/v1/otp"}
	f.Fuzz(func(t *testing.T, ep uint8, body []byte) {
		path := paths[int(ep)%len(paths)]
		key := keyNotify
		if path == "/v1/otp" {
			key = keyLogin
		}
		r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, path, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		// A valid OTP whose deadline (deadline_ms may be 1) passes before
		// the provider answers is a 503 by contract; any other 5xx is a bug.
		otpTimeout := path == "/v1/otp" && w.Code == http.StatusServiceUnavailable && w.Header().Get("Retry-After") != ""
		if w.Code >= 500 && !otpTimeout {
			t.Fatalf("%s %q: %d %s", path, body, w.Code, w.Body)
		}
		if w.Code >= 400 && w.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%s %q: %d with Content-Type %q", path, body, w.Code, w.Header().Get("Content-Type"))
		}
		checkSpec(t, r, reply{status: w.Code, header: w.Header(), body: w.Body.Bytes()})
	})
}

// FuzzDuplicateKeys adds a member to a valid request whose name is a known
// field's in any mix of cases (the same name included): the answer is
// always a 400 naming that member, never an accepted message.
func FuzzDuplicateKeys(f *testing.F) {
	f.Add(uint8(0), uint8(0), uint16(0), "+819087654321")
	f.Add(uint8(1), uint8(0), uint16(0b1), "other body")
	f.Add(uint8(0), uint8(2), uint16(0b11), "otp")
	f.Add(uint8(2), uint8(1), uint16(0xffff), "+819087654321")
	f.Add(uint8(1), uint8(3), uint16(0b10), "")
	h := start(f, embeddedMode, nil)
	handler := h.app.Handler()
	type endpoint struct {
		path, key, body string
		names           []string
	}
	eps := []endpoint{
		{"/v1/messages", keyNotify, `{"to":"+819012345678","body":"hi","class":"transactional"`, []string{"to", "body", "class"}},
		{"/v1/otp", keyLogin, `{"to":"+819012345678","body":"123456"`, []string{"to", "body"}},
	}
	f.Fuzz(func(t *testing.T, ep, field uint8, caseMask uint16, value string) {
		e := eps[int(ep)%len(eps)]
		name := []byte(e.names[int(field)%len(e.names)])
		for i := range name {
			if caseMask&(1<<i) != 0 {
				name[i] -= 'a' - 'A'
			}
		}
		v, _ := json.Marshal(value)
		body := e.body + `,"` + string(name) + `":` + string(v) + `}`
		if int(field)%2 == 1 { // the extra member first
			body = `{"` + string(name) + `":` + string(v) + "," + e.body[1:] + `}`
		}
		r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, e.path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+e.key)
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		if w.Code != http.StatusBadRequest {
			t.Fatalf("%s %s: %d, want 400; %s", e.path, body, w.Code, w.Body)
		}
		if !strings.Contains(w.Body.String(), `"field":"`+string(name)+`"`) {
			t.Fatalf("%s %s: the problem does not name %q: %s", e.path, body, name, w.Body)
		}
	})
}

// TestProducerSenders: a producer with senders may
// send only as those; without from it sends as the first; any other from
// is a 403 naming from, on the queued path, in a batch and on the OTP path.
func TestProducerSenders(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) {
		c.Producers[0].Senders = []string{"Shop", "ShopNews"} // notify
		c.Producers[1].Senders = []string{"Bank"}             // login
	})
	r := h.post("/v1/messages", keyNotify, msg("transactional"))
	wantStatus(t, r, http.StatusAccepted)
	def := accepted(t, r).ID
	wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional", "from", "ShopNews")), http.StatusAccepted)
	for _, tc := range []struct{ path, key string }{{"/v1/messages", keyNotify}, {"/v1/otp", keyLogin}} {
		body := msg("transactional", "from", "Bank")
		if tc.path == "/v1/otp" {
			body = otpBody("from", "Shop")
		}
		r := h.post(tc.path, tc.key, body)
		wantStatus(t, r, http.StatusForbidden)
		if f := r.fields(t); !slices.Contains(f, "from") {
			t.Errorf("%s: errors name %v, want from", tc.path, f)
		}
	}
	r = h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{msg("transactional", "from", "Bank"), msg("transactional")}})
	wantStatus(t, r, http.StatusOK)
	var b httpapi.BatchResponse
	r.json(t, &b)
	if b.Results[0].Status != http.StatusForbidden || b.Results[0].Error.Errors[0].Field != "messages[0].from" || b.Results[1].Status != http.StatusAccepted {
		t.Errorf("batch: %s", r.body)
	}
	var v httpapi.MessageView
	eventually(t, "the default-sender message to be sent", func() bool {
		h.get("/v1/messages/"+def, keyNotify).json(t, &v)
		return v.Status == "sent"
	})
	if v.From != "Shop" {
		t.Errorf("from %q, want the producer's first sender Shop", v.From)
	}
	for _, rec := range h.sim.Accepted() {
		if rec.From == "Bank" {
			t.Error("the provider got a message from Bank")
		}
	}
	ot := h.post("/v1/otp", keyLogin, otpBody())
	wantStatus(t, ot, http.StatusOK)
}

// TestE164SenderNormalized: an E.164 sender is one sender however it is
// written (a trunk 0 after the country code, as many write UK numbers):
// it matches the producer's senders written the other way, and goes to
// the provider normalized, on the queued and the OTP path.
func TestE164SenderNormalized(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) {
		c.Producers[0].Senders = []string{"+4402079460000"} // notify
		c.Producers[1].Senders = []string{"+442079460001"}  // login
	})
	r := h.post("/v1/messages", keyNotify, msg("transactional", "from", "+442079460000"))
	wantStatus(t, r, http.StatusAccepted)
	id := accepted(t, r).ID
	wantStatus(t, h.post("/v1/otp", keyLogin, otpBody("from", "+4402079460001")), http.StatusOK)
	var v httpapi.MessageView
	eventually(t, "the message to be sent", func() bool {
		h.get("/v1/messages/"+id, keyNotify).json(t, &v)
		return v.Status == "sent"
	})
	if v.From != "+442079460000" {
		t.Errorf("stored from %q, want +442079460000", v.From)
	}
	froms := map[string]bool{}
	for _, rec := range h.sim.Accepted() {
		froms[rec.From] = true
	}
	if !froms["+442079460000"] || !froms["+442079460001"] || len(froms) != 2 {
		t.Errorf("the provider got senders %v, want the two normalized numbers", froms)
	}
}

// piped is a request whose body the test writes as it likes (chunked, or
// with the Content-Length it declares); its answer arrives on reply.
type piped struct {
	body  *io.PipeWriter
	reply chan reply
}

func (h *harness) postPiped(path, key string, contentLength int64) *piped {
	h.t.Helper()
	pr, pw := io.Pipe()
	h.t.Cleanup(func() { _ = pw.Close() })
	hr, err := http.NewRequestWithContext(h.t.Context(), http.MethodPost, h.base+path, pr)
	if err != nil {
		h.t.Fatal(err)
	}
	if contentLength >= 0 {
		hr.ContentLength = contentLength
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+key)
	p := &piped{body: pw, reply: make(chan reply, 1)}
	go func() {
		resp, err := h.client.Do(hr)
		if err != nil {
			p.reply <- reply{status: -1, body: []byte(err.Error())}
			return
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		p.reply <- reply{status: resp.StatusCode, header: resp.Header, body: b}
	}()
	return p
}

// answer waits for the request's answer (the test's deadline bounds it).
func (p *piped) answer(t *testing.T) reply {
	t.Helper()
	select {
	case r := <-p.reply:
		return r
	case <-t.Context().Done():
		t.Fatal("no answer")
		return reply{}
	}
}

// answerWithin is answer, failing when none came within d.
func (p *piped) answerWithin(t *testing.T, d time.Duration) reply {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case r := <-p.reply:
		return r
	case <-timer.C:
		t.Fatalf("no answer within %s", d)
		return reply{}
	}
}

// TestQuotaRefusedBeforeBody: a producer this replica saw refused by its
// ingress quota is refused again before its body is read: the requests
// below send no body at all and are answered 429 with Retry-After, long
// before http.read_timeout. They were read first (up to the timeout) and
// then refused; later the handler refused at once but net/http still read
// the unread body before it sent the answer, up to the timeout too.
func TestQuotaRefusedBeforeBody(t *testing.T) {
	const readTimeout = 20 * time.Second
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			h := start(t, m, func(c *config.Config) {
				c.Producers[2].Rate, c.Producers[2].Burst = 0.001, 2 // slow: a unit every 1,000 s, however slow the machine
				c.HTTP.ReadTimeout = readTimeout
			})
			var last reply
			for range 3 {
				last = h.post("/v1/messages", keySlow, msg("transactional"))
			}
			wantStatus(t, last, http.StatusTooManyRequests)
			for _, path := range []string{"/v1/messages", "/v1/messages/batch"} {
				// Well before http.read_timeout could end a read of the body.
				r := h.postPiped(path, keySlow, -1).answerWithin(t, readTimeout/2)
				if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
					t.Fatalf("%s with its body not sent: status %d, Retry-After %q, body %s; want 429 before the body",
						path, r.status, r.header.Get("Retry-After"), r.body)
				}
			}
			// Another producer is not held.
			wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
		})
	}
}

// TestBodyBytesInFlightBounded: request bodies being read count against
// http.body_bytes_in_flight_per_producer and http.body_bytes_in_flight;
// a request over either is a 503 with Retry-After naming the key, before
// its body is read, and passes once the bytes are free.
func TestBodyBytesInFlightBounded(t *testing.T) {
	const size = 40 << 10
	h := start(t, embeddedMode, func(c *config.Config) {
		c.HTTP.MaxBodyBytes = 64 << 10
		c.HTTP.BodyBytesInFlightPerProducer = 64 << 10
		c.HTTP.BodyBytesInFlight = 100 << 10
	})
	body := func() []byte {
		item := msg("transactional", "reference", strings.Repeat("r", 100))
		var items []any
		for range size / 250 {
			items = append(items, item)
		}
		b, err := json.Marshal(map[string]any{"messages": items})
		if err != nil {
			t.Fatal(err)
		}
		return append(b, strings.Repeat(" ", size-len(b))...)
	}()
	if len(body) != size {
		t.Fatalf("body of %d bytes", len(body))
	}
	first := h.postPiped("/v1/messages/batch", keyNotify, size)
	eventually(t, "the first body's bytes reserved", func() bool { return h.app.srv.Edge.BodyGate.InFlightOf("notify") == size })

	for _, tc := range []struct{ key, names string }{
		{keyNotify, "http.body_bytes_in_flight_per_producer"},
		{keyCapped, ""}, // another producer: fits under both
	} {
		r := h.post("/v1/messages/batch", tc.key, body)
		if tc.names == "" {
			wantStatus(t, r, http.StatusOK)
			continue
		}
		wantStatus(t, r, http.StatusServiceUnavailable)
		if r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), tc.names) {
			t.Errorf("503 with Retry-After %q, body %s; want Retry-After and %s named", r.header.Get("Retry-After"), r.body, tc.names)
		}
	}
	second := h.postPiped("/v1/messages/batch", keyCapped, size)
	eventually(t, "the second body's bytes reserved", func() bool { return h.app.srv.Edge.BodyGate.InFlightOf("capped") == size })
	otp, err := json.Marshal(otpBody())
	if err != nil {
		t.Fatal(err)
	}
	otp = append(otp, strings.Repeat(" ", 30<<10)...) // 80 KiB and this are over the process's 100 KiB
	r := h.post("/v1/otp", keyLogin, otp)
	wantStatus(t, r, http.StatusServiceUnavailable)
	if !strings.Contains(string(r.body), "http.body_bytes_in_flight)") {
		t.Errorf("body %s; want http.body_bytes_in_flight named", r.body)
	}

	for _, p := range []*piped{first, second} {
		if _, err := p.body.Write(body); err != nil {
			t.Fatal(err)
		}
		_ = p.body.Close()
		if a := p.answer(t); a.status != http.StatusOK {
			t.Fatalf("the piped batch: status %d, body %s", a.status, a.body)
		}
	}
	wantStatus(t, h.post("/v1/messages/batch", keyNotify, body), http.StatusOK)
	if n := h.app.srv.Edge.BodyGate.InFlightOf("notify") + h.app.srv.Edge.BodyGate.InFlightOf("capped"); n != 0 {
		t.Errorf("%d bytes still reserved after every answer", n)
	}
}

// TestBatchDecodedAsStream: a batch is read item by item, so one item too
// many is refused as soon as it is read, while the rest of the body has
// not even been sent (it used to be read whole first).
func TestBatchDecodedAsStream(t *testing.T) {
	// The server sends its answer once it has read what is left of the
	// body (a little) or its read timeout passed: this body never ends, so
	// a short timeout keeps the test short.
	h := start(t, embeddedMode, func(c *config.Config) { c.HTTP.ReadTimeout = 2 * time.Second })
	p := h.postPiped("/v1/messages/batch", keyNotify, -1)
	item, err := json.Marshal(msg("marketing"))
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(p.body)
	_, _ = w.WriteString(`{"messages":[`)
	for i := range httpapi.MaxBatch + 1 {
		if i > 0 {
			_ = w.WriteByte(',')
		}
		_, _ = w.Write(item)
	}
	_ = w.WriteByte(',') // the body goes on; the test never ends it
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r := p.answer(t)
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"messages"`) {
		t.Fatalf("status %d, body %s; want 400 naming messages", r.status, r.body)
	}

	// Item problems are each item's own, as before.
	r = h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{msg("marketing"), msg("marketing", "to", "x")}})
	wantStatus(t, r, http.StatusOK)
	var out httpapi.BatchResponse
	r.json(t, &out)
	if out.Accepted != 1 || out.Rejected != 1 || out.Results[1].Status != http.StatusBadRequest {
		t.Errorf("accepted %d rejected %d results %+v", out.Accepted, out.Rejected, out.Results)
	}
	for _, tc := range []struct{ body, field string }{
		{`{"messages":[],"messages":[]}`, "messages"},
		{`{"Messages":[]}`, "request"},
		{`{"messages":[]} {}`, "request"},
		{`{"messages":{}}`, "messages"},
		{`{"extra":1,"messages":[{}]}`, "extra"},
		{`[]`, "request"},
		{``, "request"},
		{`{"messages":[{"to":"+819012345678"`, "request"},
	} {
		r := h.post("/v1/messages/batch", keyNotify, tc.body)
		wantStatus(t, r, http.StatusBadRequest)
		if f := r.fields(t); !slices.Contains(f, tc.field) {
			t.Errorf("%s: fields %v, want %s", tc.body, f, tc.field)
		}
	}
}

// TestConnectionsBounded: at most http.max_connections are open at once on
// a listener (a new one waits until one closes), and an idle keep-alive is
// closed after http.idle_timeout.
func TestConnectionsBounded(t *testing.T) {
	const most = 16
	h := start(t, embeddedMode, func(c *config.Config) {
		c.HTTP.MaxConnections = most
		c.HTTP.IdleTimeout = time.Hour // this part closes them itself
	})
	get := func(c net.Conn) {
		t.Helper()
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	dial := func() net.Conn {
		t.Helper()
		var d net.Dialer
		c, err := d.DialContext(t.Context(), "tcp", h.app.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	var open []net.Conn
	for range most {
		c := dial()
		get(c)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		open = append(open, c) // answered, now an idle keep-alive
	}
	extra := dial()
	get(extra)
	answered := make(chan error, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
		if err == nil {
			_ = resp.Body.Close()
		}
		answered <- err
	}()
	select {
	case err := <-answered:
		t.Fatalf("a connection past %d open ones was served at once (err %v)", most, err)
	case <-time.After(time.Second): // a bound on a negative: nothing may come
	}
	_ = open[0].Close()
	if err := <-answered; err != nil {
		t.Fatalf("once a connection closed: %v", err)
	}
}

// TestIdleConnectionClosed: a keep-alive idle for http.idle_timeout is
// closed by the gateway.
func TestIdleConnectionClosed(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) { c.HTTP.IdleTimeout = 100 * time.Millisecond })
	var d net.Dialer
	c, err := d.DialContext(t.Context(), "tcp", h.app.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	// The server's close is the state waited for; the test's deadline
	// bounds the wait.
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("read on the idle connection: %v; want EOF (closed by the gateway)", err)
	}
}

// TestAuthFailuresThrottled: failed authentications
// from one client address are throttled (429 with Retry-After once its
// budget is spent) and their WARN lines sampled, while a valid key from the
// same address still works.
func TestAuthFailuresThrottled(t *testing.T) {
	h := start(t, embeddedMode, nil)
	counts := map[int]int{}
	began := time.Now()
	for i := range 40 {
		path, key := "/v1/messages", "wrong-key-0123456789"
		if i%2 == 1 {
			path = "/v1/admin/stats"
		}
		var r reply
		if path == "/v1/messages" {
			r = h.post(path, key, msg("transactional"))
		} else {
			r = h.get(path, key)
		}
		counts[r.status]++
		if r.status == http.StatusTooManyRequests && r.header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
	// The budget refills once a second: a loaded machine that takes
	// seconds for the 40 requests earns them more 401s.
	const refill = time.Second
	allowed := auththrottle.Burst + int(time.Since(began)/refill) + 1
	if (counts[http.StatusTooManyRequests] == 0 && allowed < 40) || counts[http.StatusUnauthorized] > allowed {
		t.Errorf("40 failed authentications: %v; want at most %d 401s (%d, and one per %s they took), then 429s", counts, allowed, auththrottle.Burst, refill)
	}
	if n := strings.Count(h.logs.String(), `"unknown `); n > 3 {
		t.Errorf("%d WARN lines for 40 failures; want them sampled", n)
	}
	wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
	wantStatus(t, h.get("/v1/admin/stats", keyAdmin), http.StatusOK)
}

// TestAuthFailuresThrottledPerIPv6Prefix: an IPv6 client that picks a new
// source address within its /64 for every attempt shares one budget (it
// used to get a fresh one per address, and could flush the table); another
// /64, and IPv4 addresses, keep their own. Through real HTTP, the client
// address taken from a trusted proxy's X-Forwarded-For.
func TestAuthFailuresThrottledPerIPv6Prefix(t *testing.T) {
	s := newSim(t, sim.Config{})
	cfg := testConfig(t, embeddedMode, s.URL())
	cfg.HTTP.TrustedProxies = []string{"127.0.0.1/32", "::1/128"}
	h := startWith(t, cfg, s)
	try := func(client string) int {
		return h.post("/v1/messages", "wrong-key-0123456789", msg("transactional"), "X-Forwarded-For", client).status
	}
	counts := map[int]int{}
	began := time.Now()
	for i := range 3 * auththrottle.Burst {
		counts[try(fmt.Sprintf("2001:db8:1:2:%x::%x", i, i+1))]++
	}
	// One more 401 per second the attempts took (a loaded machine).
	allowed := auththrottle.Burst + int(time.Since(began)/time.Second) + 1
	if counts[http.StatusUnauthorized] > allowed || (counts[http.StatusTooManyRequests] == 0 && allowed < 3*auththrottle.Burst) {
		t.Errorf("%d failures from distinct addresses of one /64: %v; want at most %d 401s, then 429s",
			3*auththrottle.Burst, counts, allowed)
	}
	for _, other := range []string{"2001:db8:1:3::1", "::ffff:198.51.100.7", "198.51.100.8"} {
		if got := try(other); got != http.StatusUnauthorized {
			t.Errorf("first failure from %s (another client): %d, want 401", other, got)
		}
	}
	// IPv4 clients are one address each, and a mapped address is its IPv4:
	// once 198.51.100.7 is answered 429, so is its mapped form, unless the
	// budget refilled (a second) in between on a loaded machine.
	for n := 0; try("198.51.100.7") != http.StatusTooManyRequests; n++ {
		if n > 10*auththrottle.Burst {
			t.Fatalf("198.51.100.7 is never throttled")
		}
	}
	at := time.Now()
	if got := try("::ffff:198.51.100.7"); got != http.StatusTooManyRequests && time.Since(at) < time.Second {
		t.Errorf("198.51.100.7 after its budget, written IPv4-mapped: %d, want 429", got)
	}
	if got := try("198.51.100.9"); got != http.StatusUnauthorized {
		t.Errorf("first failure from 198.51.100.9: %d, want 401", got)
	}
}

func TestAuthFailClient(t *testing.T) {
	for in, want := range map[string]string{
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64",
		"2001:db8:1:2::7":      "2001:db8:1:2::/64",
		"fe80::1%eth0":         "fe80::/64",
		"::ffff:198.51.100.7":  "198.51.100.7",
		"198.51.100.7":         "198.51.100.7",
		"":                     "",
		"not an address":       "not an address",
	} {
		if got := auththrottle.Client(in); got != want {
			t.Errorf("authFailClient(%q) = %q, want %q", in, got, want)
		}
	}
}

// A request with two Authorization fields is 401 whichever keys they hold
// and in whichever order, on the producer and the admin API: a proxy in
// front may read the other field than the gateway, so neither is taken.
func TestAuthorizationTwiceRefused(t *testing.T) {
	h := start(t, embeddedMode, nil)
	for _, tc := range []struct {
		method, path, body string
		keys               []string
	}{
		{http.MethodPost, "/v1/messages", `{"to":"+819012345678","body":"hello","class":"marketing"}`, []string{keyLogin, keyNotify}},
		{http.MethodPost, "/v1/messages", `{"to":"+819012345678","body":"hello","class":"marketing"}`, []string{keyNotify, keyNotify}},
		{http.MethodGet, "/v1/admin/stats", "", []string{keyAdmin, keyNotify}},
		{http.MethodGet, "/v1/admin/stats", "", []string{keyNotify, keyAdmin}},
	} {
		hr, err := http.NewRequestWithContext(t.Context(), tc.method, h.base+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set("Content-Type", "application/json")
		for _, k := range tc.keys {
			hr.Header.Add("Authorization", "Bearer "+k)
		}
		resp, err := h.client.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s with two Authorization fields: %d, want 401", tc.method, tc.path, resp.StatusCode)
		}
	}
	wantStatus(t, h.post("/v1/messages", keyNotify, msg("marketing")), http.StatusAccepted)
}

// keys a rotation replaces, and one nobody holds.
const (
	keyNotifyOld = "notify-old-key-0123456789"
	keyAdminOld  = "admin-old-key-0123456789ab"
	keyStranger  = "stranger-key-0123456789"
)

func hexSHA256(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// rotating gives producer notify a previous key in clear and the admin
// one as its SHA-256.
func rotating(c *config.Config) {
	c.Producers[0].PreviousKey = keyNotifyOld
	c.Admin.PreviousKeySHA256 = hexSHA256(keyAdminOld)
}

// previousKeyLines are the logged lines that say a previous key is still
// in use, by principal: each one's uses.
func previousKeyLines(t testing.TB, logs string) map[string][]float64 {
	t.Helper()
	out := map[string][]float64{}
	for _, l := range strings.Split(logs, "\n") {
		if !strings.Contains(l, "previous key still in use") {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if rec["level"] != "INFO" {
			t.Errorf("previous key logged at %v, want INFO", rec["level"])
		}
		p, _ := rec["principal"].(string)
		n, _ := rec["uses"].(float64)
		out[p] = append(out[p], n)
	}
	return out
}

// noKeysIn fails t when text shows a key of the rotation tests, in clear
// or as its SHA-256.
func noKeysIn(t testing.TB, what, text string) {
	t.Helper()
	for _, k := range []string{keyNotify, keyNotifyOld, keyAdmin, keyAdminOld, keyStranger} {
		if strings.Contains(text, k) || strings.Contains(text, hexSHA256(k)) || strings.Contains(text, hexSHA256(k)[:16]) {
			t.Errorf("%s shows a key or its hash (%.8s...)", what, k)
		}
	}
}

// TestPreviousKeyAuthenticates: while producer notify's and the admin's
// keys are rotated, a request bearing the current or the previous key is
// that principal (202 on POST /v1/messages, the message its own; 200 on
// the admin API), any third key is 401 and a producer's previous key is
// no admin key (403). smsgw_auth_previous_key_total counts the previous
// keys' uses alone, in series of the rotating principals only, and each
// principal's use is logged at INFO at most once a minute of the
// gateway's clock, without the key.
func TestPreviousKeyAuthenticates(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		var ahead atomic.Int64 // how far the gateway's clock runs ahead of the wall clock
		now := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
		s := newSim(t, sim.Config{})
		cfg := testConfig(t, m, s.URL())
		rotating(&cfg)
		h := startOpts(t, cfg, s, Options{Now: now})
		zero := metricValues(h.metrics(), "smsgw_auth_previous_key_total")
		if len(zero) != 2 || zero[`smsgw_auth_previous_key_total{principal="notify"}`] != 0 || zero[`smsgw_auth_previous_key_total{principal="admin"}`] != 0 {
			t.Errorf("before any request: %v, want the rotating principals' series at 0", zero)
		}

		cur := accepted(t, h.post("/v1/messages", keyNotify, msg("transactional")))
		var old []httpapi.AcceptedMessage
		for range 3 {
			old = append(old, accepted(t, h.post("/v1/messages", keyNotifyOld, msg("transactional"))))
		}
		// The previous key's messages are notify's: its current key reads
		// them, and the other way round.
		wantStatus(t, h.get("/v1/messages/"+old[0].ID, keyNotify), http.StatusOK)
		wantStatus(t, h.get("/v1/messages/"+cur.ID, keyNotifyOld), http.StatusOK)
		wantStatus(t, h.get("/v1/messages/"+old[0].ID, keySlow), http.StatusNotFound)
		wantStatus(t, h.post("/v1/messages", keyStranger, msg("transactional")), http.StatusUnauthorized)
		wantStatus(t, h.post("/v1/messages", keyAdminOld, msg("transactional")), http.StatusUnauthorized)
		accepted(t, h.post("/v1/messages", keySlow, msg("transactional"))) // a producer that is not rotating

		wantStatus(t, h.get("/v1/admin/stats", keyAdmin), http.StatusOK)
		wantStatus(t, h.get("/v1/admin/stats", keyAdminOld), http.StatusOK)
		wantStatus(t, h.get("/v1/admin/stats", keyAdminOld), http.StatusOK)
		wantStatus(t, h.get("/v1/admin/stats", keyStranger), http.StatusUnauthorized)
		wantStatus(t, h.get("/v1/admin/stats", keyNotifyOld), http.StatusForbidden)

		// notify: 3 POSTs and 1 GET with its previous key; admin: 2 GETs.
		want := map[string]float64{
			`smsgw_auth_previous_key_total{principal="notify"}`: 4,
			`smsgw_auth_previous_key_total{principal="admin"}`:  2,
		}
		got := metricValues(h.metrics(), "smsgw_auth_previous_key_total")
		if len(got) != len(want) {
			t.Errorf("series %v, want only those of the rotating principals %v", got, want)
		}
		for series, v := range want {
			if got[series] != v {
				t.Errorf("%s = %v, want %v", series, got[series], v)
			}
		}
		lines := previousKeyLines(t, h.logs.String())
		if len(lines["notify"]) != 1 || len(lines["admin"]) != 1 || len(lines) != 2 {
			t.Errorf("previous-key lines %v, want one for notify and one for admin within the minute", lines)
		}

		// A minute later on the gateway's clock, the next use is logged
		// again, with the uses left out since the last line.
		ahead.Store(int64(time.Minute + time.Second))
		wantStatus(t, h.get("/v1/messages/"+old[1].ID, keyNotifyOld), http.StatusOK)
		wantStatus(t, h.get("/v1/admin/stats", keyAdmin), http.StatusOK) // the current key: no line
		lines = previousKeyLines(t, h.logs.String())
		if n := lines["notify"]; len(n) != 2 || n[0] != 1 || n[1] != 4 {
			t.Errorf("notify's lines say %v uses, want [1 4] (the first use, then the three since)", n)
		}
		if n := lines["admin"]; len(n) != 1 {
			t.Errorf("admin's lines say %v uses, want one line: no use of its previous key since", n)
		}
		noKeysIn(t, "the log", h.logs.String())
		noKeysIn(t, "/metrics", h.metrics())
	})
}

// TestPreviousKeyRemoved: once the pods run a configuration without
// previous_key (the rotation's last step), the old keys are 401 and the
// new ones still work; the counter's series is gone with them.
func TestPreviousKeyRemoved(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		before := start(t, m, rotating)
		accepted(t, before.post("/v1/messages", keyNotifyOld, msg("transactional")))
		wantStatus(t, before.get("/v1/admin/stats", keyAdminOld), http.StatusOK)

		after := start(t, m, nil)
		wantStatus(t, after.post("/v1/messages", keyNotifyOld, msg("transactional")), http.StatusUnauthorized)
		wantStatus(t, after.get("/v1/admin/stats", keyAdminOld), http.StatusUnauthorized)
		accepted(t, after.post("/v1/messages", keyNotify, msg("transactional")))
		wantStatus(t, after.get("/v1/admin/stats", keyAdmin), http.StatusOK)
		if got := metricValues(after.metrics(), "smsgw_auth_previous_key_total"); len(got) != 0 {
			t.Errorf("series without a rotation: %v", got)
		}
	})
}
