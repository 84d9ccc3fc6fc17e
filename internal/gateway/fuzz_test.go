package gateway

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzDecodeMessage sends arbitrary bytes to the producer endpoints through
// the real handler chain of a running App (embedded store, simulator):
// never a panic, never a 5xx, and every 4xx is a problem+json.
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
		if w.Code >= 500 {
			t.Fatalf("%s %q: %d %s", path, body, w.Code, w.Body)
		}
		if w.Code >= 400 && w.Header().Get("Content-Type") != "application/problem+json" {
			t.Fatalf("%s %q: %d with Content-Type %q", path, body, w.Code, w.Header().Get("Content-Type"))
		}
		checkSpec(t, r, reply{status: w.Code, header: w.Header(), body: w.Body.Bytes()})
	})
}
