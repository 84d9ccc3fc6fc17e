// Package dashboard is the ops page of smsgw: a few static files, embedded
// in the binary, that the gateway serves at /dashboard/. The page is a
// plain client of the public /v1 admin API (it holds the admin key in the
// browser's sessionStorage and sends it as a bearer token), so it has no
// server-side state and no access the API does not give.
package dashboard

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
)

//go:embed static
var static embed.FS

// Prefix is where the gateway mounts the page. Handler accepts request
// paths with or without it.
const Prefix = "/dashboard"

// ContentSecurityPolicy allows only this origin's own files: no inline
// script or style, no plugins, no framing, no third-party fetches. The key
// therefore cannot leave the origin through anything the page loads.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; font-src 'none'; object-src 'none'; base-uri 'none'; form-action 'none'; " +
	"frame-ancestors 'none'; require-trusted-types-for 'script'"

var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

type file struct {
	body        []byte
	contentType string
	etag        string
}

// files is read once: the embedded set never changes at run time.
var files = func() map[string]file {
	out := map[string]file{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			return nil // not served: only types we can name exactly
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[strings.TrimPrefix(p, "static")] = file{body: b, contentType: ct,
			etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic("dashboard: embedded files unreadable: " + err.Error()) // a build defect, not a runtime failure
	}
	return out
}()

// Handler serves the embedded page. "/" (and "/dashboard/") is index.html.
// Every answer says Cache-Control: no-cache with an ETag, so a new binary's
// page is picked up at once and an unchanged one costs a 304. Range is
// ignored (no Accept-Ranges): every 200 is the whole file.
func Handler() http.Handler {
	return http.HandlerFunc(serve)
}

func serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-cache")

	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	if p == Prefix {
		// The page's URLs are relative to the directory.
		http.Redirect(w, r, Prefix+"/", http.StatusMovedPermanently)
		return
	}
	p = strings.TrimPrefix(p, Prefix)
	if p == "/" {
		p = "/index.html"
	}
	f, ok := files[p]
	if !ok {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	h.Set("ETag", f.etag)
	if etagMatches(r.Header.Get("If-None-Match"), f.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	// The whole file, whatever Range asks: the page is a few small files,
	// and a request of many tiny ranges (multipart/byteranges) answered
	// many times its own size from a route that needs no key.
	h.Set("Content-Type", f.contentType)
	h.Set("Content-Length", strconv.Itoa(len(f.body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(f.body)
	}
}

// etagMatches reports whether an If-None-Match field names etag (or is
// "*"): a list of entity tags, compared weakly (RFC 9110 section 13.1.2).
func etagMatches(field, etag string) bool {
	for t := range strings.SplitSeq(field, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}
