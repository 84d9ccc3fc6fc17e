package vonage_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// TestAnswerScopes: status 1 ("Throughput Rate Exceeded", a US number over
// 1/s) is the sender's throttle; 23 (our callback URL refused) is our
// setup, the account's; a bad number is the message's.
func TestAnswerScopes(t *testing.T) {
	t.Parallel()
	want := map[string]struct {
		reason provider.Reason
		scope  provider.Scope
	}{
		"1":  {provider.ReasonThrottled, provider.ScopeSender},
		"23": {provider.ReasonSetup, provider.ScopeAccount},
		"8":  {provider.ReasonSuspended, provider.ScopeAccount},
		"3":  {provider.ReasonRejected, provider.ScopeMessage},
	}
	status := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeStatus(w, <-status, "", "Throughput Rate Exceeded - please wait [ 978 ] and retry")
	}))
	defer srv.Close()
	p := newProvider(t, srv.URL, 0)
	defer p.CloseIdleConnections()
	for st, w := range want {
		status <- st
		_, err := p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", From: "Mkt1", Body: "x"})
		if pe := provider.AsError(err); pe == nil || pe.Reason != w.reason || pe.ScopeOf() != w.scope {
			t.Errorf("status %s: got %+v, want %s of scope %s", st, pe, w.reason, w.scope)
		}
	}
}
