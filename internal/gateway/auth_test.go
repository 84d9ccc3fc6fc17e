package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"smsgw/internal/config"
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
