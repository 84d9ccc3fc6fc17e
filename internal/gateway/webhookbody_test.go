package gateway

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
)

// TestWebhookBodyLogsSampled, through real HTTP: the provider's endpoints
// take no bearer key, so anyone may post to them. A body over their bound
// (sent with or without a length) is 413 and one cut short by its client
// is dropped; either way the WARN and ERROR lines they cause are sampled
// (the first, then at most one a minute with the count), as failed bearer
// keys are, so that an unauthenticated client cannot write one log line
// per request.
func TestWebhookBodyLogsSampled(t *testing.T) {
	h := start(t, embeddedMode, func(c *config.Config) { c.Provider.ReceiptSecret = receiptSecret })
	big := `{"from":"+819012345678","text":"` + strings.Repeat("x", httpapi.MaxInboundBytes) + `"}`
	const n = 10
	before := len(h.logs.String()) // start-up's own WARN lines are not these
	for _, path := range []string{"/v1/inbound/http", "/v1/receipts/http"} {
		for range n {
			wantStatus(t, h.do(req{method: http.MethodPost, path: path, body: big}), http.StatusRequestEntityTooLarge)
			wantStatus(t, h.do(req{method: http.MethodPost, path: path, body: strings.NewReader(big)}), http.StatusRequestEntityTooLarge)
			cutShort(t, h, path)
		}
	}
	lines := 0
	for l := range strings.SplitSeq(strings.TrimSpace(h.logs.String()[before:]), "\n") {
		var e struct{ Level string }
		if json.Unmarshal([]byte(l), &e) == nil && (e.Level == "WARN" || e.Level == "ERROR") {
			lines++
		}
	}
	if lines > 2 {
		t.Fatalf("%d unauthenticated bad bodies wrote %d WARN or ERROR lines; want at most one per endpoint:\n%s",
			6*n, lines, h.logs.String()[before:])
	}
}

// cutShort posts to path a body shorter than its Content-Length and
// closes the connection, as a client that went away does.
func cutShort(t *testing.T, h *harness, path string) {
	t.Helper()
	var d net.Dialer
	c, err := d.DialContext(t.Context(), "tcp", strings.TrimPrefix(h.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	_, _ = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"from\":", path)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [512]byte
	_, _ = c.Read(b[:]) // the answer, or the close
}
