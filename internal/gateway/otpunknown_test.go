package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"smsgw/internal/httpapi"
	"smsgw/internal/provider/sim"
	"smsgw/internal/sms"
)

// TestOTPUnknownKeepsID: an OTP whose outcome is
// unknown (the provider did not answer within the deadline) keeps its id
// under the request's Idempotency-Key, so the retry reaches the provider
// with the same idempotency key and reference, and the provider can drop
// the duplicate.
func TestOTPUnknownKeepsID(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	h, refs := otpRefProvider(t, func(n int, _ http.ResponseWriter, r *http.Request) bool {
		if n > 2 {
			return false
		}
		select { // no answer within the caller's deadline
		case <-r.Context().Done():
		case <-release:
		}
		return true
	})

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
	var sent httpapi.OTPSent
	third.json(t, &sent)
	if seen := refs(); len(seen) != 3 || seen[0] != seen[1] || seen[1] != seen[2] {
		t.Fatalf("the provider saw %v; want the same reference and key three times", seen)
	}
	if sent.ID != id {
		t.Errorf("the retry sent %s, the first attempts %s", sent.ID, id)
	}
	var v httpapi.MessageView
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
// otp under a new id).
func TestOTPDroppedConnectionKeepsID(t *testing.T) {
	h, refs := otpRefProvider(t, func(n int, w http.ResponseWriter, _ *http.Request) bool {
		if n > 1 {
			return false
		}
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
		return true
	})
	first := h.post("/v1/otp", keyLogin, otpBody("deadline_ms", 2000), "Idempotency-Key", "login-77")
	wantStatus(t, first, http.StatusServiceUnavailable)
	id, _ := first.problem(t)["id"].(string)
	if id == "" {
		t.Errorf("the dropped connection's problem does not name the message id: %s", first.body)
	}
	second := h.post("/v1/otp", keyLogin, otpBody("deadline_ms", 2000), "Idempotency-Key", "login-77")
	wantStatus(t, second, http.StatusOK)
	var sent httpapi.OTPSent
	second.json(t, &sent)
	if seen := refs(); len(seen) < 2 || seen[0] != seen[len(seen)-1] || sent.ID != id {
		t.Fatalf("the provider saw %v and the retry sent %s; want every attempt under %s", seen, sent.ID, id)
	}
}

// otpRefProvider starts an embedded-mode gateway whose provider records
// the reference and Idempotency-Key of every send it gets; fail handles
// the nth (from 1) and returns true when it answered it, else the send is
// accepted. refs returns what was recorded.
func otpRefProvider(t *testing.T, fail func(n int, w http.ResponseWriter, r *http.Request) bool) (*harness, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Reference string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		seen = append(seen, req.Reference+"/"+r.Header.Get("Idempotency-Key"))
		n := len(seen)
		mu.Unlock()
		if fail(n, w, r) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"p-1"}`))
	}))
	t.Cleanup(srv.Close)
	cfg := testConfig(t, embeddedMode, newSim(t, sim.Config{}).URL())
	cfg.Provider.HTTP.URL = srv.URL
	return startWith(t, cfg, nil), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}
