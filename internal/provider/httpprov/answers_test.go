package httpprov_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/provider/httpprov"
	"smsgw/internal/sms"
)

// Some 4xx answers say "not now", not "never": 408 (the server gave up
// reading the request, RFC 9110 section 15.5.9: the client may repeat it),
// 409 (the Idempotency-Key draft's answer to a retry that arrives while the
// first request with the key is still being processed: the message may
// well be sent) and 425 (RFC 8470: retry). Failing the message for good on
// them loses a message a retry with the same key would send, or marks
// failed one the provider is delivering. The others stay final.
func TestTransientClientErrorsRetried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status    int
		reason    provider.Reason
		temporary bool
	}{
		{http.StatusRequestTimeout, provider.ReasonUnavailable, true},
		{http.StatusConflict, provider.ReasonUnavailable, true},
		{http.StatusTooEarly, provider.ReasonUnavailable, true},
		{http.StatusBadRequest, provider.ReasonRejected, false},
		{http.StatusNotFound, provider.ReasonRejected, false},
		{http.StatusGone, provider.ReasonRejected, false},
		{http.StatusRequestEntityTooLarge, provider.ReasonRejected, false},
		{http.StatusUnprocessableEntity, provider.ReasonRejected, false},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(tc.status)
			_, _ = io.WriteString(w, `{"error":"x"}`)
		}))
		p, err := httpprov.New(httpprov.Config{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", Body: "x"})
		pe := provider.AsError(err)
		if pe == nil || pe.Reason != tc.reason || pe.Temporary != tc.temporary || pe.Status != tc.status {
			t.Errorf("%d: got %+v, want %s temporary=%v", tc.status, pe, tc.reason, tc.temporary)
		}
		p.CloseIdleConnections()
		srv.Close()
	}
}

// A suspension whose Retry-After gives no usable time ("0", garbage, a
// date already past) pauses SuspendedPause like one without the header,
// not the 1 s floor: every replica would probe the suspended account
// every second.
func TestSuspendedUnreadableRetryAfter(t *testing.T) {
	t.Parallel()
	past := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		ra    string
		pause time.Duration
	}{
		{"", httpprov.SuspendedPause},
		{"0", httpprov.SuspendedPause},
		{"-5", httpprov.SuspendedPause},
		{"later", httpprov.SuspendedPause},
		{past, httpprov.SuspendedPause},
		{"30", 30 * time.Second},
		{"99999999", provider.MaxRetryAfter},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			if tc.ra != "" {
				w.Header().Set("Retry-After", tc.ra)
			}
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"error":"account suspended"}`)
		}))
		p, err := httpprov.New(httpprov.Config{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", Body: "x"})
		if pe := provider.AsError(err); pe == nil || pe.Reason != provider.ReasonSuspended || pe.RetryAfter != tc.pause {
			t.Errorf("Retry-After %q: got %+v, want suspended for %v", tc.ra, pe, tc.pause)
		}
		p.CloseIdleConnections()
		srv.Close()
	}
}
