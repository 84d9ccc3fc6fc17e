package dashboard_test

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"smsgw/internal/dashboard"
)

func TestHandler(t *testing.T) {
	t.Parallel()
	h := dashboard.Handler()
	tests := []struct {
		method, path string
		status       int
		contentType  string
		body         string // a substring of the body
	}{
		{"GET", "/dashboard/", 200, "text/html; charset=utf-8", `<script type="module" src="app.js"></script>`},
		{"GET", "/dashboard/index.html", 200, "text/html; charset=utf-8", "<title>smsgw ops</title>"},
		{"GET", "/dashboard/app.js", 200, "text/javascript; charset=utf-8", "sessionStorage"},
		{"GET", "/dashboard/style.css", 200, "text/css; charset=utf-8", ":root"},
		{"GET", "/dashboard/icon.svg", 200, "image/svg+xml", "<svg"},
		{"HEAD", "/dashboard/app.js", 200, "text/javascript; charset=utf-8", ""},
		{"GET", "/", 200, "text/html; charset=utf-8", "<title>smsgw ops</title>"}, // mounted without the prefix
		{"GET", "/app.js", 200, "text/javascript; charset=utf-8", "sessionStorage"},
		{"GET", "/dashboard/nope.js", 404, "text/plain; charset=utf-8", "not found"},
		{"GET", "/dashboard/static/app.js", 404, "text/plain; charset=utf-8", ""},
		{"GET", "/dashboard/../go.mod", 404, "text/plain; charset=utf-8", ""},
		{"POST", "/dashboard/", 405, "text/plain; charset=utf-8", ""},
		{"GET", "/dashboard", 301, "text/html; charset=utf-8", "/dashboard/"},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), tc.method, tc.path, nil))
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d", rec.Code, tc.status)
			}
			hd := rec.Header()
			if got := hd.Get("Content-Type"); got != tc.contentType {
				t.Errorf("Content-Type %q, want %q", got, tc.contentType)
			}
			if got := hd.Get("Content-Security-Policy"); got != dashboard.ContentSecurityPolicy {
				t.Errorf("Content-Security-Policy %q", got)
			}
			for k, want := range map[string]string{"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
				"Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"} {
				if got := hd.Get(k); got != want {
					t.Errorf("%s %q, want %q", k, got, want)
				}
			}
			if tc.status == 405 && hd.Get("Allow") != "GET, HEAD" {
				t.Errorf("Allow %q", hd.Get("Allow"))
			}
			if !strings.Contains(rec.Body.String(), tc.body) {
				t.Errorf("body lacks %q", tc.body)
			}
			if tc.method == "HEAD" && rec.Body.Len() != 0 {
				t.Errorf("HEAD answered a body")
			}
		})
	}
}

func TestConditionalGet(t *testing.T) {
	t.Parallel()
	h := dashboard.Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), "GET", "/dashboard/app.js", nil))
	etag := rec.Header().Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	req := httptest.NewRequestWithContext(t.Context(), "GET", "/dashboard/app.js", nil)
	req.Header.Set("If-None-Match", etag)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotModified || rec.Body.Len() != 0 {
		t.Fatalf("revalidation: status %d, %d bytes; want 304 and none", rec.Code, rec.Body.Len())
	}
}

func TestCSPIsStrict(t *testing.T) {
	t.Parallel()
	csp := dashboard.ContentSecurityPolicy
	for _, want := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "object-src 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP lacks %q", want)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "*", "http:", "https:", "data:"} {
		if strings.Contains(csp, bad) {
			t.Errorf("CSP allows %q", bad)
		}
	}
}

// The files must work offline under the CSP: no inline script, style or
// handler, no third-party URL, and no HTML sink (Trusted Types are required).
func TestStaticFilesAreSelfContained(t *testing.T) {
	t.Parallel()
	var (
		inlineScript = regexp.MustCompile(`(?is)<script\b[^>]*>\s*[^<\s]`)
		inlineStyle  = regexp.MustCompile(`(?i)<style\b|\sstyle\s*=`)
		handlerAttr  = regexp.MustCompile(`(?i)\son[a-z]+\s*=`)
		externalURL  = regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
		htmlSink     = regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function`)
	)
	root := "static"
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		s := string(b)
		for _, m := range externalURL.FindAllString(s, -1) {
			if m != "http://www.w3.org" { // the SVG namespace name, never fetched
				t.Errorf("%s: external URL %q", p, m)
			}
		}
		switch filepath.Ext(p) {
		case ".html":
			if inlineScript.MatchString(s) || inlineStyle.MatchString(s) || handlerAttr.MatchString(s) {
				t.Errorf("%s: inline script, style or event handler", p)
			}
		case ".js":
			if m := htmlSink.FindString(s); m != "" {
				t.Errorf("%s: uses %s", p, m)
			}
			if strings.Contains(s, "localStorage") {
				t.Errorf("%s: the admin key belongs in sessionStorage only", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
