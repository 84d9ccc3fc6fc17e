package httpprov_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/provider/httpprov"
	"smsgw/internal/sms"
)

// TestSenderScopedThrottle: a 429 whose body says {"scope": "sender"} is
// the sender's throttle; any other 429 (another scope, none, no JSON) the
// account's.
func TestSenderScopedThrottle(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]provider.Scope{
		`{"error":"sender rate limit exceeded","scope":"sender"}`: provider.ScopeSender,
		`{"error":"rate limit exceeded","scope":"account"}`:       provider.ScopeAccount,
		`{"error":"rate limit exceeded"}`:                         provider.ScopeAccount,
		`slow down`:                                               provider.ScopeAccount,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(body))
		}))
		p, err := httpprov.New(httpprov.Config{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", From: "Mkt1", Body: "x"})
		pe := provider.AsError(err)
		if pe == nil || pe.Reason != provider.ReasonThrottled || pe.ScopeOf() != want || pe.RetryAfter != 2*time.Second {
			t.Errorf("429 %s: got %+v, want a throttle of scope %s for 2 s", body, pe, want)
		}
		srv.Close()
	}
	// The simulator speaks it.
	b, _ := json.Marshal(httpprov.ErrorResponse{Error: "x", Scope: httpprov.ScopeSender})
	if string(b) != `{"error":"x","scope":"sender"}` {
		t.Errorf("wire form %s", b)
	}
}
