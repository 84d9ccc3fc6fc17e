package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
	"smsgw/internal/redistest"
)

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
	const n = 20
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
