package webhook

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRefused(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1": true, "10.1.2.3": true, "172.16.0.1": true, "192.168.1.1": true, "169.254.169.254": true,
		"0.0.0.0": true, "100.64.0.1": true, "224.0.0.1": true, "255.255.255.255": true, "::1": true, "fe80::1": true,
		"fd00::1": true, "::": true, "::ffff:127.0.0.1": true, "64:ff9b::7f00:1": true, "ff02::1": true,
		"::7f00:1": true, "::a01:203": true, "64:ff9b:1::a01:203": true, "2002:7f00:1::1": true, "2002:c0a8:101::": true,
		"2001:0:4136:e378::1": true, "2001:db8::1": true, "fec0::1": true, "100::1": true,
		"93.184.216.34": false, "2606:2800:220:1::1": false, "64:ff9b::5db8:d822": false, "2002:5db8:d822::1": false,
	} {
		if got := Refused(netip.MustParseAddr(addr), nil); got != want {
			t.Errorf("Refused(%s) = %v, want %v", addr, got, want)
		}
	}
	allow := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	if Refused(netip.MustParseAddr("10.1.2.3"), allow) || !Refused(netip.MustParseAddr("192.168.1.1"), allow) {
		t.Error("allow_networks 10.0.0.0/8 must allow 10.1.2.3 and nothing else")
	}
}

// A real listener on the loopback address is refused by default, also
// through a name that resolves to it (the check is at connect time), and
// reached once its network is allowed.
func TestClientRefusesPrivateAddressesAtConnect(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))

	c := NewClient(2*time.Second, nil)
	defer c.CloseIdleConnections()
	for _, u := range []string{srv.URL, "http://localhost:" + port + "/cb"} {
		resp, err := post(t, c, u)
		if err == nil {
			_ = resp.Body.Close()
			t.Fatalf("POST %s: reached a loopback listener", u)
		}
		if !refusedErr(err) {
			t.Fatalf("POST %s: %v, want ErrRefusedAddress", u, err)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("the listener saw %d requests", hits.Load())
	}

	allowed := NewClient(2*time.Second, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")})
	defer allowed.CloseIdleConnections()
	resp, err := post(t, allowed, srv.URL)
	if err != nil {
		t.Fatalf("with allow_networks: %v", err)
	}
	_ = resp.Body.Close()
	if hits.Load() != 1 {
		t.Fatalf("the listener saw %d requests, want 1", hits.Load())
	}
}

// A redirect to another host is not followed (its answer counts as the
// delivery's: not 2xx); one to the same host is.
func TestClientRedirects(t *testing.T) {
	var other atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { other.Add(1) }))
	defer elsewhere.Close()
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, elsewhere.URL+"/x", http.StatusTemporaryRedirect)
		case "/here":
			http.Redirect(w, r, srv.URL+"/final", http.StatusTemporaryRedirect)
		case "/found":
			http.Redirect(w, r, srv.URL+"/final", http.StatusFound) // a GET without the body would follow
		case "/final":
			if r.Method != http.MethodPost {
				w.WriteHeader(http.StatusOK) // what a lenient receiver answers to a GET
				return
			}
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer srv.Close()
	c := NewClient(2*time.Second, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
	defer c.CloseIdleConnections()
	status := func(path string) int {
		t.Helper()
		resp, err := post(t, c, srv.URL+path)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if code := status("/away"); code != http.StatusTemporaryRedirect || other.Load() != 0 {
		t.Fatalf("redirect to another host: status %d, other host hit %d times", code, other.Load())
	}
	if code := status("/here"); code != http.StatusNoContent {
		t.Fatalf("same-host redirect: status %d, want 204", code)
	}
	if code := status("/found"); code != http.StatusFound {
		t.Fatalf("a 302 (which turns the POST into a GET) was followed: status %d, want the 302 itself", code)
	}
}

// TestEndpointOf: one endpoint (concurrency, breaker) however a URL
// spells its host and default port.
func TestEndpointOf(t *testing.T) {
	for raw, want := range map[string]string{
		"https://Notify.Example/cb/x":   "https://notify.example",
		"https://notify.example:443/cb": "https://notify.example",
		"HTTPS://NOTIFY.EXAMPLE/cb":     "https://notify.example",
		"http://notify.example:80/x":    "http://notify.example",
		"http://notify.example:8080/x":  "http://notify.example:8080",
		"https://[2001:DB8::1]:443/x":   "https://[2001:db8::1]",
		"https://[2001:db8::1]:8443/x":  "https://[2001:db8::1]:8443",
		"not a url with a host":         "invalid",
	} {
		if got := endpointOf(raw); got != want {
			t.Errorf("endpointOf(%q) = %q, want %q", raw, got, want)
		}
	}
}

func post(t *testing.T, c *http.Client, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, u, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return c.Do(req)
}

// An endpoint's answer is read with a small header budget: one that sends
// megabytes of headers (each of Workers deliveries would hold them in
// memory, 10 MiB apiece by net/http's default) fails the attempt instead.
func TestClientBoundsResponseHeaders(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for i := range 64 {
			w.Header().Set("X-Pad-"+strconv.Itoa(i), strings.Repeat("x", 8<<10))
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	c := NewClient(2*time.Second, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")})
	defer c.CloseIdleConnections()
	resp, err := post(t, c, srv.URL)
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("512 KiB of response headers accepted (status %d)", resp.StatusCode)
	}
}
