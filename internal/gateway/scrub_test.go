package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"smsgw/internal/httpapi"
	"smsgw/internal/provider/sim"
)

// quotingProvider is a provider that quotes the recipient and the body in
// its error text, as Twilio's 21211 quotes the number: the first send is
// refused for good (400), every later one fails for now (500).
func quotingProvider(t *testing.T) string {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ To, Body string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		status := http.StatusInternalServerError
		if calls.Add(1) == 1 {
			status = http.StatusBadRequest
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		national := strings.TrimPrefix(req.To, "+81")
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "The 'To' number " + req.To +
			" (0" + national[:2] + "-" + national[2:6] + "-" + national[6:] + ") is not valid for body: " + req.Body})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestProviderTextScrubbed: a provider error that
// quotes the number and the body reaches last_error, the admin API, the
// dead letters and the logs without either.
func TestProviderTextScrubbed(t *testing.T) {
	url := quotingProvider(t)
	cfg := testConfig(t, embeddedMode, newSim(t, sim.Config{}).URL())
	cfg.Provider.HTTP.URL = url
	cfg.Dispatch.MaxAttempts = 1
	h := startWith(t, cfg, nil)
	const body = "Secret parcel code 4321 for you"
	ids := make([]string, 2)
	for i := range ids {
		r := h.post("/v1/messages", keyNotify, msg("transactional", "body", body))
		wantStatus(t, r, http.StatusAccepted)
		ids[i] = accepted(t, r).ID
		eventually(t, "the message to fail", func() bool {
			var v httpapi.MessageView
			h.get("/v1/messages/"+ids[i], keyNotify).json(t, &v)
			return v.Status == "failed"
		})
	}
	leaks := func(what string, text string) {
		t.Helper()
		for _, secret := range []string{"9012345678", "90-1234-5678", body, "parcel code"} {
			if strings.Contains(text, secret) {
				t.Errorf("%s holds %q: %s", what, secret, text)
			}
		}
	}
	for _, id := range ids {
		var v httpapi.MessageView // the producer reads its own number back; not in last_error
		h.get("/v1/messages/"+id, keyNotify).json(t, &v)
		leaks("last_error of GET /v1/messages/"+id, v.LastError)
		leaks("GET /v1/admin/messages/"+id, string(h.get("/v1/admin/messages/"+id, keyAdmin).body))
	}
	dead := h.get("/v1/admin/dead-letters", keyAdmin)
	wantStatus(t, dead, http.StatusOK)
	if !strings.Contains(string(dead.body), ids[1]) {
		t.Fatalf("the second message is not a dead letter: %s", dead.body)
	}
	leaks("GET /v1/admin/dead-letters", string(dead.body))
	var v httpapi.MessageView
	h.get("/v1/messages/"+ids[0], keyNotify).json(t, &v)
	// The provider's reason is its status and that status's fixed text;
	// its own words are never kept.
	if !strings.Contains(v.LastError, "status 400") || !strings.HasSuffix(v.LastError, "Bad Request") || strings.Contains(v.LastError, "is not valid") {
		t.Errorf("last_error %q is not the status and its fixed text", v.LastError)
	}
	leaks("the log", h.logs.String())
}

// A problem's instance is the request path as the logs show it: a number
// in the path (DELETE /v1/admin/suppressions/{number}) is masked, and a
// long path is cut to maxInstanceLen bytes.
func TestProblemInstanceScrubbed(t *testing.T) {
	t.Parallel()
	h := start(t, embeddedMode, nil)

	for _, path := range []string{"/v1/admin/suppressions/+819012345678", "/v1/admin/suppressions/%2B819012345678"} {
		r := h.do(req{method: http.MethodDelete, path: path, key: keyAdmin})
		wantStatus(t, r, http.StatusNotFound)
		inst, _ := r.problem(t)["instance"].(string)
		if strings.Contains(inst, "9012345678") || !strings.HasPrefix(inst, "/v1/admin/suppressions/+81") ||
			inst != "/v1/admin/suppressions/"+"+8190****5678" {
			t.Errorf("DELETE %s: instance %q, want the number masked as in the logs", path, inst)
		}
	}
	// Another problem kind on a path with a number: the same scrub.
	r := h.get("/v1/messages/msg_819012345678", keyNotify)
	wantStatus(t, r, http.StatusNotFound)
	if inst, _ := r.problem(t)["instance"].(string); strings.Contains(inst, "9012345678") {
		t.Errorf("GET: instance %q shows the number", inst)
	}

	long := "/v1/messages/" + strings.Repeat("é", 8000) // 16 KB, two bytes a character
	r = h.get(long, keyNotify)
	wantStatus(t, r, http.StatusNotFound)
	inst, _ := r.problem(t)["instance"].(string)
	if len(inst) > httpapi.MaxInstanceLen || !strings.HasPrefix(inst, "/v1/messages/éé") || !strings.HasSuffix(inst, "...") {
		t.Errorf("instance of a %d-byte path: %d bytes %q, want at most %d ending with ...", len(long), len(inst), inst, httpapi.MaxInstanceLen)
	}
	if strings.ContainsRune(inst, '\uFFFD') {
		t.Errorf("instance cut inside a character: %q", inst)
	}
	if len(r.body) > 2048 {
		t.Errorf("problem body is %d bytes for a long path", len(r.body))
	}
	// A short path is shown whole.
	r = h.get("/v1/messages/msg_nope", keyNotify)
	wantStatus(t, r, http.StatusNotFound)
	if inst, _ := r.problem(t)["instance"].(string); inst != "/v1/messages/msg_nope" {
		t.Errorf("instance %q, want /v1/messages/msg_nope", inst)
	}
}
