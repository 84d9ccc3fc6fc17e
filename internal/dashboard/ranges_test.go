package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"smsgw/internal/dashboard"
	"smsgw/internal/testclient"
)

// TestRangeIgnored: the page's files are served whole whatever Range asks.
// A request of many one-byte ranges was answered as multipart/byteranges,
// each part with its own headers: many times the request's size, from a
// route that needs no key.
func TestRangeIgnored(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(dashboard.Handler())
	t.Cleanup(srv.Close)
	get := func(rng string) (int, http.Header, []byte) {
		t.Helper()
		req := testclient.New(t, http.MethodGet, srv.URL+"/dashboard/app.js", "")
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp := testclient.Do(t, srv.Client(), req)
		return resp.Status, resp.Header, resp.Body
	}
	status, header, want := get("")
	if status != http.StatusOK || len(want) == 0 {
		t.Fatalf("plain GET: status %d, %d bytes", status, len(want))
	}
	if v := header.Get("Accept-Ranges"); v != "" {
		t.Errorf("Accept-Ranges %q on a plain GET; want none", v)
	}
	ranges := make([]string, 0, 400)
	for i := range 400 {
		ranges = append(ranges, strconv.Itoa(i)+"-"+strconv.Itoa(i))
	}
	for _, rng := range []string{"bytes=0-0", "bytes=" + strings.Join(ranges, ","), "bytes=-1"} {
		status, header, got := get(rng)
		if status != http.StatusOK || string(got) != string(want) {
			t.Errorf("Range %.30s...: status %d, %d bytes; want 200 and the whole file (%d bytes)",
				rng, status, len(got), len(want))
		}
		if v := header.Get("Content-Range") + header.Get("Accept-Ranges"); v != "" {
			t.Errorf("Range %.30s...: Content-Range/Accept-Ranges %q; want none", rng, v)
		}
	}
}
