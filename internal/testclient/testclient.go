// Package testclient sends a test's HTTP requests in one call: build the
// request on the test's context, send it, read the answer in full and close
// it. A request that cannot be built or sent, or an answer that cannot be
// read, fails the test; the status is the caller's to judge.
package testclient

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Response is an answer read in full.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// New builds a request on t's context. A body that is not empty is sent
// as JSON (Content-Type: application/json); header holds further name,
// value pairs.
func New(t testing.TB, method, url, body string, header ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

// Do sends req with c (http.DefaultClient when nil) and reads the answer.
func Do(t testing.TB, c *http.Client, req *http.Request) Response {
	t.Helper()
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", req.Method, req.URL.Path, err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// PostJSON posts body as JSON to url with http.DefaultClient.
func PostJSON(t testing.TB, url, body string) Response {
	t.Helper()
	return Do(t, nil, New(t, http.MethodPost, url, body))
}
