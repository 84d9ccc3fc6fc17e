package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"smsgw/internal/httpapi"
	"smsgw/internal/provider/sim"
)

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
	allowed := httpapi.AuthFailBurst + int(time.Since(began)/refill) + 1
	if (counts[http.StatusTooManyRequests] == 0 && allowed < 40) || counts[http.StatusUnauthorized] > allowed {
		t.Errorf("40 failed authentications: %v; want at most %d 401s (%d, and one per %s they took), then 429s", counts, allowed, httpapi.AuthFailBurst, refill)
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
	for i := range 3 * httpapi.AuthFailBurst {
		counts[try(fmt.Sprintf("2001:db8:1:2:%x::%x", i, i+1))]++
	}
	// One more 401 per second the attempts took (a loaded machine).
	allowed := httpapi.AuthFailBurst + int(time.Since(began)/time.Second) + 1
	if counts[http.StatusUnauthorized] > allowed || (counts[http.StatusTooManyRequests] == 0 && allowed < 3*httpapi.AuthFailBurst) {
		t.Errorf("%d failures from distinct addresses of one /64: %v; want at most %d 401s, then 429s",
			3*httpapi.AuthFailBurst, counts, allowed)
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
		if n > 10*httpapi.AuthFailBurst {
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
		if got := httpapi.AuthFailClient(in); got != want {
			t.Errorf("authFailClient(%q) = %q, want %q", in, got, want)
		}
	}
}
