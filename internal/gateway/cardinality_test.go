package gateway

import (
	"crypto/rand"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// TestMetricLabelsBounded: requests with made-up methods, paths and
// headers add no series to /metrics; the methods are counted as "other".
func TestMetricLabelsBounded(t *testing.T) {
	h := start(t, embeddedMode, nil)
	before := metricValues(h.metrics(), "smsgw_http_requests_total", "smsgw_http_request_duration_seconds_count")
	const n = 30
	for i := range n {
		method := "X" + strings.ToUpper(rand.Text()) + strings.Repeat("Z", 1000)
		path := []string{"/v1/messages", "/nope/" + rand.Text(), "/metrics", "/v1/admin/" + rand.Text()}[i%4]
		hr, err := http.NewRequestWithContext(t.Context(), method, h.base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set("X-Request-Id", rand.Text())
		resp, err := h.client.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	after := metricValues(h.metrics(), "smsgw_http_requests_total", "smsgw_http_request_duration_seconds_count")
	standard := regexp.MustCompile(`method="(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS|CONNECT|TRACE|other)"`)
	others := 0.0
	for series, v := range after {
		if strings.Contains(series, "method=") && !standard.MatchString(series) {
			t.Errorf("a series for a request's own method: %.80s...", series)
		}
		if strings.Contains(series, `method="other"`) {
			others += v
		}
		if len(series) > 200 {
			t.Errorf("a series label longer than any route: %.80s...", series)
		}
	}
	if others != n {
		t.Errorf("method=\"other\" counted %v requests, want %d", others, n)
	}
	if grew := len(after) - len(before); grew > 8 {
		t.Errorf("%d requests added %d series", n, grew)
	}
}
