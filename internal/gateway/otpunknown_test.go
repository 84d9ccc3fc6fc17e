package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"smsgw/internal/provider/sim"
	"smsgw/internal/sms"
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
		unanswered := len(refs) <= 2
		mu.Unlock()
		if unanswered {
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

	var id string
	for i := range 2 {
		r := h.post("/v1/otp", keyLogin, otpBody("deadline_ms", 300), "Idempotency-Key", "login-42")
		wantStatus(t, r, http.StatusServiceUnavailable)
		got, _ := r.problem(t)["id"].(string)
		if got == "" {
			t.Fatalf("attempt %d: the unknown outcome's problem does not name the message id: %s", i+1, r.body)
		}
		if i > 0 && got != id {
			t.Errorf("attempt %d used id %s, the first %s", i+1, got, id)
		}
		id = got
	}
	third := h.post("/v1/otp", keyLogin, otpBody("deadline_ms", 2000), "Idempotency-Key", "login-42")
	wantStatus(t, third, http.StatusOK)
	var sent otpSent
	third.json(t, &sent)
	mu.Lock()
	if len(refs) != 3 || refs[0] != refs[1] || refs[1] != refs[2] {
		t.Fatalf("the provider saw %v; want the same reference and key three times", refs)
	}
	mu.Unlock()
	if sent.ID != id {
		t.Errorf("the retry sent %s, the first attempts %s", sent.ID, id)
	}
	var v messageView
	eventually(t, "the sent OTP stored", func() bool {
		g := h.get("/v1/messages/"+sent.ID, keyLogin)
		if g.status != http.StatusOK {
			return false
		}
		g.json(t, &v)
		return true
	})
	if v.Status != sms.StatusSent || v.Attempts != 3 {
		t.Errorf("the OTP's record: status %s, attempts %d; want sent after 3 attempts", v.Status, v.Attempts)
	}
}

// TestOTPDroppedConnectionKeepsID: a provider connection dropped after the
// request was read is an unknown outcome, not "nothing was sent": the
// retry under the same Idempotency-Key reaches the provider with the same
// id, so a provider that honours the key drops it (an audit saw a second
// OTP under a new id).
func TestOTPDroppedConnectionKeepsID(t *testing.T) {
	var mu sync.Mutex
	var refs []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Reference string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		refs = append(refs, req.Reference+"/"+r.Header.Get("Idempotency-Key"))
		first := len(refs) == 1
		mu.Unlock()
		if first {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"p-1"}`))
	}))
	defer srv.Close()
	cfg := testConfig(t, embeddedMode, newSim(t, sim.Config{}).URL())
	cfg.Provider.HTTP.URL = srv.URL
	h := startWith(t, cfg, nil)
	first := h.post("/v1/otp", keyLogin, otpBody("deadline_ms", 2000), "Idempotency-Key", "login-77")
	wantStatus(t, first, http.StatusServiceUnavailable)
	id, _ := first.problem(t)["id"].(string)
	if id == "" {
		t.Errorf("the dropped connection's problem does not name the message id: %s", first.body)
	}
	second := h.post("/v1/otp", keyLogin, otpBody("deadline_ms", 2000), "Idempotency-Key", "login-77")
	wantStatus(t, second, http.StatusOK)
	var sent otpSent
	second.json(t, &sent)
	mu.Lock()
	defer mu.Unlock()
	if len(refs) < 2 || refs[0] != refs[len(refs)-1] || sent.ID != id {
		t.Fatalf("the provider saw %v and the retry sent %s; want every attempt under %s", refs, sent.ID, id)
	}
}
