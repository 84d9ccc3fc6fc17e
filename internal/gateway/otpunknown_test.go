package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"smsgw/internal/provider/sim"
)

// TestOTPUnknownKeepsID (issue 8, finding 9): an OTP whose outcome is
// unknown (the provider did not answer within the deadline) keeps its id
// under the request's Idempotency-Key, so the retry reaches the provider
// with the same idempotency key and reference, and the provider can drop
// the duplicate.
func TestOTPUnknownKeepsID(t *testing.T) {
	var mu sync.Mutex
	var refs []string
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Reference string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		refs = append(refs, req.Reference+"/"+r.Header.Get("Idempotency-Key"))
		first := len(refs) == 1
		mu.Unlock()
		if first {
			select { // no answer within the caller's deadline
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"p-1"}`))
	}))
	defer srv.Close()
	defer close(release)
	cfg := testConfig(t, embeddedMode, newSim(t, sim.Config{}).URL())
	cfg.Provider.HTTP.URL = srv.URL
	h := startWith(t, cfg, nil)

	first := h.post("/v1/otp", keyLogin, otpBody("deadline_ms", 300), "Idempotency-Key", "login-42")
	wantStatus(t, first, http.StatusServiceUnavailable)
	id, _ := first.problem(t)["id"].(string)
	if id == "" {
		t.Errorf("the unknown outcome's problem does not name the message id: %s", first.body)
	}
	second := h.post("/v1/otp", keyLogin, otpBody("deadline_ms", 2000), "Idempotency-Key", "login-42")
	wantStatus(t, second, http.StatusOK)
	var sent otpSent
	second.json(t, &sent)
	mu.Lock()
	defer mu.Unlock()
	if len(refs) != 2 || refs[0] != refs[1] {
		t.Fatalf("the provider saw %v; want the same reference and key twice", refs)
	}
	if id != "" && sent.ID != id {
		t.Errorf("the retry sent %s, the first attempt %s", sent.ID, id)
	}
}
