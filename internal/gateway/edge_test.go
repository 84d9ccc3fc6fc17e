package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
)

// piped is a request whose body the test writes as it likes (chunked, or
// with the Content-Length it declares); its answer arrives on reply.
type piped struct {
	body  *io.PipeWriter
	reply chan reply
}

func (h *harness) postPiped(path, key string, contentLength int64) *piped {
	h.t.Helper()
	pr, pw := io.Pipe()
	h.t.Cleanup(func() { _ = pw.Close() })
	hr, err := http.NewRequestWithContext(h.t.Context(), http.MethodPost, h.base+path, pr)
	if err != nil {
		h.t.Fatal(err)
	}
	if contentLength >= 0 {
		hr.ContentLength = contentLength
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+key)
	p := &piped{body: pw, reply: make(chan reply, 1)}
	go func() {
		resp, err := h.client.Do(hr)
		if err != nil {
			p.reply <- reply{status: -1, body: []byte(err.Error())}
			return
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		p.reply <- reply{status: resp.StatusCode, header: resp.Header, body: b}
	}()
	return p
}

// answer waits for the request's answer (the test's deadline bounds it).
func (p *piped) answer(t *testing.T) reply {
	t.Helper()
	select {
	case r := <-p.reply:
		return r
	case <-t.Context().Done():
		t.Fatal("no answer")
		return reply{}
	}
}

// answerWithin is answer, failing when none came within d.
func (p *piped) answerWithin(t *testing.T, d time.Duration) reply {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case r := <-p.reply:
		return r
	case <-timer.C:
		t.Fatalf("no answer within %s", d)
		return reply{}
	}
}

// TestQuotaRefusedBeforeBody: a producer this replica saw refused by its
// ingress quota is refused again before its body is read: the requests
// below send no body at all and are answered 429 with Retry-After, long
// before http.read_timeout. They were read first (up to the timeout) and
// then refused; later the handler refused at once but net/http still read
// the unread body before it sent the answer, up to the timeout too.
func TestQuotaRefusedBeforeBody(t *testing.T) {
	const readTimeout = 20 * time.Second
	for _, m := range modes {
		t.Run(string(m), func(t *testing.T) {
			h := start(t, m, func(c *config.Config) {
				c.Producers[2].Rate, c.Producers[2].Burst = 0.001, 2 // slow: a unit every 1,000 s, however slow the machine
				c.HTTP.ReadTimeout = readTimeout
			})
			var last reply
			for range 3 {
				last = h.post("/v1/messages", keySlow, msg("transactional"))
			}
			wantStatus(t, last, http.StatusTooManyRequests)
			for _, path := range []string{"/v1/messages", "/v1/messages/batch"} {
				// Well before http.read_timeout could end a read of the body.
				r := h.postPiped(path, keySlow, -1).answerWithin(t, readTimeout/2)
				if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
					t.Fatalf("%s with its body not sent: status %d, Retry-After %q, body %s; want 429 before the body",
						path, r.status, r.header.Get("Retry-After"), r.body)
				}
			}
			// Another producer is not held.
			wantStatus(t, h.post("/v1/messages", keyNotify, msg("transactional")), http.StatusAccepted)
		})
	}
}

// TestBodyBytesInFlightBounded: request bodies being read count against
// http.body_bytes_in_flight_per_producer and http.body_bytes_in_flight;
// a request over either is a 503 with Retry-After naming the key, before
// its body is read, and passes once the bytes are free.
func TestBodyBytesInFlightBounded(t *testing.T) {
	const size = 40 << 10
	h := start(t, embeddedMode, func(c *config.Config) {
		c.HTTP.MaxBodyBytes = 64 << 10
		c.HTTP.BodyBytesInFlightPerProducer = 64 << 10
		c.HTTP.BodyBytesInFlight = 100 << 10
	})
	body := func() []byte {
		item := msg("transactional", "reference", strings.Repeat("r", 100))
		var items []any
		for range size / 250 {
			items = append(items, item)
		}
		b, err := json.Marshal(map[string]any{"messages": items})
		if err != nil {
			t.Fatal(err)
		}
		return append(b, strings.Repeat(" ", size-len(b))...)
	}()
	if len(body) != size {
		t.Fatalf("body of %d bytes", len(body))
	}
	first := h.postPiped("/v1/messages/batch", keyNotify, size)
	eventually(t, "the first body's bytes reserved", func() bool { return h.app.srv.Edge.BodyGate.InFlightOf("notify") == size })

	for _, tc := range []struct{ key, names string }{
		{keyNotify, "http.body_bytes_in_flight_per_producer"},
		{keyCapped, ""}, // another producer: fits under both
	} {
		r := h.post("/v1/messages/batch", tc.key, body)
		if tc.names == "" {
			wantStatus(t, r, http.StatusOK)
			continue
		}
		wantStatus(t, r, http.StatusServiceUnavailable)
		if r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), tc.names) {
			t.Errorf("503 with Retry-After %q, body %s; want Retry-After and %s named", r.header.Get("Retry-After"), r.body, tc.names)
		}
	}
	second := h.postPiped("/v1/messages/batch", keyCapped, size)
	eventually(t, "the second body's bytes reserved", func() bool { return h.app.srv.Edge.BodyGate.InFlightOf("capped") == size })
	otp, err := json.Marshal(otpBody())
	if err != nil {
		t.Fatal(err)
	}
	otp = append(otp, strings.Repeat(" ", 30<<10)...) // 80 KiB and this are over the process's 100 KiB
	r := h.post("/v1/otp", keyLogin, otp)
	wantStatus(t, r, http.StatusServiceUnavailable)
	if !strings.Contains(string(r.body), "http.body_bytes_in_flight)") {
		t.Errorf("body %s; want http.body_bytes_in_flight named", r.body)
	}

	for _, p := range []*piped{first, second} {
		if _, err := p.body.Write(body); err != nil {
			t.Fatal(err)
		}
		_ = p.body.Close()
		if a := p.answer(t); a.status != http.StatusOK {
			t.Fatalf("the piped batch: status %d, body %s", a.status, a.body)
		}
	}
	wantStatus(t, h.post("/v1/messages/batch", keyNotify, body), http.StatusOK)
	if n := h.app.srv.Edge.BodyGate.InFlightOf("notify") + h.app.srv.Edge.BodyGate.InFlightOf("capped"); n != 0 {
		t.Errorf("%d bytes still reserved after every answer", n)
	}
}

// TestBatchDecodedAsStream: a batch is read item by item, so one item too
// many is refused as soon as it is read, while the rest of the body has
// not even been sent (it used to be read whole first).
func TestBatchDecodedAsStream(t *testing.T) {
	h := start(t, embeddedMode, nil)
	p := h.postPiped("/v1/messages/batch", keyNotify, -1)
	item, err := json.Marshal(msg("marketing"))
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(p.body)
	_, _ = w.WriteString(`{"messages":[`)
	for i := range httpapi.MaxBatch + 1 {
		if i > 0 {
			_ = w.WriteByte(',')
		}
		_, _ = w.Write(item)
	}
	_ = w.WriteByte(',') // the body goes on; the test never ends it
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r := p.answer(t)
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"messages"`) {
		t.Fatalf("status %d, body %s; want 400 naming messages", r.status, r.body)
	}

	// Item problems are each item's own, as before.
	r = h.post("/v1/messages/batch", keyNotify, map[string]any{"messages": []any{msg("marketing"), msg("marketing", "to", "x")}})
	wantStatus(t, r, http.StatusOK)
	var out httpapi.BatchResponse
	r.json(t, &out)
	if out.Accepted != 1 || out.Rejected != 1 || out.Results[1].Status != http.StatusBadRequest {
		t.Errorf("accepted %d rejected %d results %+v", out.Accepted, out.Rejected, out.Results)
	}
	for _, tc := range []struct{ body, field string }{
		{`{"messages":[],"messages":[]}`, "messages"},
		{`{"Messages":[]}`, "request"},
		{`{"messages":[]} {}`, "request"},
		{`{"messages":{}}`, "messages"},
		{`{"extra":1,"messages":[{}]}`, "extra"},
		{`[]`, "request"},
		{``, "request"},
		{`{"messages":[{"to":"+819012345678"`, "request"},
	} {
		r := h.post("/v1/messages/batch", keyNotify, tc.body)
		wantStatus(t, r, http.StatusBadRequest)
		if f := r.fields(t); !slices.Contains(f, tc.field) {
			t.Errorf("%s: fields %v, want %s", tc.body, f, tc.field)
		}
	}
}

// TestConnectionsBounded: at most http.max_connections are open at once on
// a listener (a new one waits until one closes), and an idle keep-alive is
// closed after http.idle_timeout.
func TestConnectionsBounded(t *testing.T) {
	const most = 16
	h := start(t, embeddedMode, func(c *config.Config) {
		c.HTTP.MaxConnections = most
		c.HTTP.IdleTimeout = time.Hour // this part closes them itself
	})
	get := func(c net.Conn) {
		t.Helper()
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	dial := func() net.Conn {
		t.Helper()
		var d net.Dialer
		c, err := d.DialContext(t.Context(), "tcp", h.app.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	var open []net.Conn
	for range most {
		c := dial()
		get(c)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		open = append(open, c) // answered, now an idle keep-alive
	}
	extra := dial()
	get(extra)
	answered := make(chan error, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
		if err == nil {
			_ = resp.Body.Close()
		}
		answered <- err
	}()
	select {
	case err := <-answered:
		t.Fatalf("a connection past %d open ones was served at once (err %v)", most, err)
	case <-time.After(time.Second): // a bound on a negative: nothing may come
	}
	_ = open[0].Close()
	if err := <-answered; err != nil {
		t.Fatalf("once a connection closed: %v", err)
	}
}

// TestIdleConnectionClosed: a keep-alive idle for http.idle_timeout is
// closed by the gateway.
func TestIdleConnectionClosed(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) { c.HTTP.IdleTimeout = 100 * time.Millisecond })
	var d net.Dialer
	c, err := d.DialContext(t.Context(), "tcp", h.app.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	// The server's close is the state waited for; the test's deadline
	// bounds the wait.
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("read on the idle connection: %v; want EOF (closed by the gateway)", err)
	}
}
