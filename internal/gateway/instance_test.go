package gateway

import (
	"net/http"
	"strings"
	"testing"

	"smsgw/internal/httpapi"
)

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
