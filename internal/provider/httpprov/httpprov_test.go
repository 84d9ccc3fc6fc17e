package httpprov_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"smsgw/internal/provider"
	"smsgw/internal/provider/httpprov"
	"smsgw/internal/provider/providertest"
	"smsgw/internal/sms"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const token = "s3cr3t-token"

// decode reads one request of the generic protocol the way a provider would.
func decode(r *http.Request) (providertest.Sent, error) {
	if r.Method != http.MethodPost || r.URL.Path != "/send" {
		return providertest.Sent{}, fmt.Errorf("%s %s, want POST /send", r.Method, r.URL.Path)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		return providertest.Sent{}, fmt.Errorf("content type %q", ct)
	}
	var body httpprov.SendRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return providertest.Sent{}, fmt.Errorf("decode body: %w", err)
	}
	return providertest.Sent{To: body.To, From: body.From, Body: body.Body, Reference: body.Reference,
		IdempotencyKey: r.Header.Get("Idempotency-Key"),
		Authorized:     r.Header.Get("Authorization") == "Bearer "+token}, nil
}

// respond writes the generic protocol's answers (the simulator's).
func respond(w http.ResponseWriter, s providertest.Step) {
	w.Header().Set("Content-Type", "application/json")
	write := func(status int, v any) {
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	switch s.Kind {
	case providertest.Accept:
		write(http.StatusOK, httpprov.SendResponse{ID: s.ProviderID})
	case providertest.Throttle, providertest.VendorThrottle:
		if s.RetryAfter != "" {
			w.Header().Set("Retry-After", s.RetryAfter)
		}
		write(http.StatusTooManyRequests, httpprov.ErrorResponse{Error: "rate limit exceeded"})
	case providertest.Unavailable:
		write(s.Status, httpprov.ErrorResponse{Error: "upstream down"})
	case providertest.Rejected:
		write(http.StatusBadRequest, httpprov.ErrorResponse{Error: "invalid number"})
	case providertest.Unauthorized:
		write(http.StatusUnauthorized, httpprov.ErrorResponse{Error: "bad token"})
	case providertest.Suspended:
		if s.RetryAfter != "" {
			w.Header().Set("Retry-After", s.RetryAfter)
		}
		write(http.StatusForbidden, httpprov.ErrorResponse{Error: "account suspended"})
	case providertest.Garbage:
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "<html>ok</html>")
	}
}

func harness() providertest.Harness {
	return providertest.Harness{
		Decode:  decode,
		Respond: respond,
		New: func(t *testing.T, baseURL string, timeout time.Duration) provider.Provider {
			p, err := httpprov.New(httpprov.Config{URL: baseURL + "/send", Token: token, Timeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		IdempotencyHeader: true,
		Secrets:           []string{token},
	}
}

func TestConformance(t *testing.T) { providertest.Run(t, harness()) }

// One rule for the endpoint: Settings.Validate names the key under the
// prefix it is given (the configuration passes "provider"), and New refuses
// the same values naming "httpprov.url". A bad timeout names its key too.
func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  httpprov.Config
		want string // key; "" = accepted
	}{
		{httpprov.Config{}, "url"},
		{httpprov.Config{URL: "127.0.0.1:9100/send"}, "url"},
		{httpprov.Config{URL: "ftp://x/send"}, "url"},
		{httpprov.Config{URL: "http://user:pw@/send"}, "url"},
		{httpprov.Config{URL: "http://x/send", Timeout: -time.Second}, "timeout"},
		{httpprov.Config{URL: "http://x/send", Token: token}, ""},
	} {
		var se *httpprov.SettingError
		verr := httpprov.Settings{URL: tc.cfg.URL, Token: tc.cfg.Token}.Validate("provider")
		switch {
		case tc.want == "url" && (!errors.As(verr, &se) || se.Key != "provider.url"):
			t.Errorf("Validate(%q) = %v, want an error naming provider.url", tc.cfg.URL, verr)
		case tc.want != "url" && verr != nil:
			t.Errorf("Validate(%q) = %v, want nil", tc.cfg.URL, verr)
		}
		p, err := httpprov.New(tc.cfg)
		if tc.want == "" {
			if err != nil {
				t.Errorf("New(%+v) = %v", tc.cfg, err)
			} else {
				p.CloseIdleConnections()
			}
			continue
		}
		if !errors.As(err, &se) || se.Key != "httpprov."+tc.want {
			t.Errorf("New(URL %q, timeout %v) = %v, want an error naming httpprov.%s", tc.cfg.URL, tc.cfg.Timeout, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("error shows the URL's password: %v", err)
		}
	}
}

// sendTo sends one message through the adapter to a server answering
// with h, and returns Send's error.
func sendTo(t *testing.T, h http.HandlerFunc) error {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	p, err := httpprov.New(httpprov.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer p.CloseIdleConnections()
	_, err = p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", Body: "x"})
	return err
}

// The simulator's suspension carries the remaining time; the adapter must
// pass it on exactly, and a 403 that is not a suspension is an auth failure.
func TestForbiddenSuspendedVersusAuth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body   string
		ra     string
		reason provider.Reason
		pause  time.Duration
	}{
		{`{"error":"account suspended"}`, "3540", provider.ReasonSuspended, 3540 * time.Second},
		{`{"error":"Account Suspended until later"}`, "", provider.ReasonSuspended, httpprov.SuspendedPause},
		{`{"error":"forbidden"}`, "5", provider.ReasonAuth, 0},
		{`not json`, "", provider.ReasonAuth, 0},
	} {
		err := sendTo(t, func(w http.ResponseWriter, r *http.Request) {
			if tc.ra != "" {
				w.Header().Set("Retry-After", tc.ra)
			}
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, tc.body)
		})
		pe := provider.AsError(err)
		if pe == nil || pe.Reason != tc.reason || pe.RetryAfter != tc.pause {
			t.Errorf("403 %s (Retry-After %q): got %v, want %s with pause %v", tc.body, tc.ra, err, tc.reason, tc.pause)
		}
		if pe != nil && pe.Temporary != (tc.reason == provider.ReasonSuspended) {
			t.Errorf("403 %s: Temporary = %v", tc.body, pe.Temporary)
		}
	}
}

// The extensions the simulator counts with: segments, class and the
// gateway's acceptance time.
func TestSendsSegmentsClassAndAcceptedAt(t *testing.T) {
	t.Parallel()
	type seen struct {
		body       httpprov.SendRequest
		acceptedAt string
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var s seen
		s.acceptedAt = r.Header.Get(httpprov.HeaderAcceptedAt)
		if err := json.NewDecoder(r.Body).Decode(&s.body); err != nil {
			t.Errorf("decode: %v", err)
		}
		got <- s
		_, _ = io.WriteString(w, `{"id":"p1"}`)
	}))
	defer srv.Close()
	p, err := httpprov.New(httpprov.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer p.CloseIdleConnections()
	created := time.UnixMilli(time.Now().UnixMilli())
	req := &provider.Request{ID: sms.NewID(created), To: "+819012345678", Body: "hi", Segments: 3, Class: sms.ClassMarketing}
	if _, err := p.Send(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	s := <-got
	if s.body.Segments != 3 || s.body.Class != "marketing" || s.body.Reference != req.ID {
		t.Errorf("body = %+v", s.body)
	}
	if s.acceptedAt != strconv.FormatInt(created.UnixNano(), 10) {
		t.Errorf("%s = %q, want %d", httpprov.HeaderAcceptedAt, s.acceptedAt, created.UnixNano())
	}
}

func TestIDTime(t *testing.T) {
	t.Parallel()
	for _, ms := range []int64{0, 1, 1764500000123, 1<<48 - 1} {
		id := sms.NewID(time.UnixMilli(ms))
		got, ok := httpprov.IDTime(id)
		if !ok || got.UnixMilli() != ms {
			t.Errorf("IDTime(%s) = %v %v, want %d ms", id, got.UnixMilli(), ok, ms)
		}
	}
	if _, ok := httpprov.IDTime("not-an-id"); ok {
		t.Error("IDTime accepted a non-id")
	}
}

// A caller's cancellation is reported as a timeout (outcome unknown), never
// as a bare context error the send loop would have to interpret.
func TestCanceledContext(t *testing.T) {
	t.Parallel()
	p, err := httpprov.New(httpprov.Config{URL: "http://127.0.0.1:1/send"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = p.Send(ctx, &provider.Request{ID: "x", To: "+819012345678", Body: "x"})
	if pe := provider.AsError(err); pe == nil || pe.Reason != provider.ReasonTimeout {
		t.Errorf("got %v, want a timeout", err)
	}
}

// Debug logs carry the masked number, never the full one or the token.
func TestLogsMaskNumbersAndSecrets(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":"invalid number"}`)
	}))
	defer srv.Close()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := httpprov.New(httpprov.Config{URL: srv.URL, Token: token, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer p.CloseIdleConnections()
	_, err = p.Send(context.Background(), &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", Body: "x"})
	if pe := provider.AsError(err); pe == nil || pe.Reason != provider.ReasonRejected || pe.Message != "Bad Request" {
		t.Fatalf("got %v", err)
	}
	out := buf.String()
	if !strings.Contains(out, "+8190****5678") || strings.Contains(out, "+819012345678") || strings.Contains(out, token) {
		t.Fatalf("log: %s", out)
	}
}

// TestNotSent: a send whose dial fails never left this process (NotSent:
// the OTP fast path may say nothing was sent); one whose connection is
// dropped after the provider read the request may have reached it.
func TestNotSent(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close() // nothing listens there now: the dial is refused
	var read atomic.Int64
	dropping := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		read.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close() // the request was read; no answer
		}
	}))
	defer dropping.Close()
	for _, c := range []struct {
		url     string
		notSent bool
	}{{closedURL, true}, {dropping.URL, false}} {
		p, err := httpprov.New(httpprov.Config{URL: c.url + "/send", Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Send(context.Background(), &provider.Request{ID: "msg-1", To: "+819012345678", Body: "x"})
		pe := provider.AsError(err)
		if pe == nil || pe.Reason != provider.ReasonNetwork || pe.NotSent != c.notSent {
			t.Errorf("%s: %+v, want a network error with NotSent %v", c.url, pe, c.notSent)
		}
		p.CloseIdleConnections()
	}
	if n := read.Load(); n < 1 {
		t.Errorf("the dropping server read %d requests, want the send", n)
	}
}

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
		err := sendTo(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(tc.status)
			_, _ = io.WriteString(w, `{"error":"x"}`)
		})
		pe := provider.AsError(err)
		if pe == nil || pe.Reason != tc.reason || pe.Temporary != tc.temporary || pe.Status != tc.status {
			t.Errorf("%d: got %+v, want %s temporary=%v", tc.status, pe, tc.reason, tc.temporary)
		}
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
		err := sendTo(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			if tc.ra != "" {
				w.Header().Set("Retry-After", tc.ra)
			}
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"error":"account suspended"}`)
		})
		if pe := provider.AsError(err); pe == nil || pe.Reason != provider.ReasonSuspended || pe.RetryAfter != tc.pause {
			t.Errorf("Retry-After %q: got %+v, want suspended for %v", tc.ra, pe, tc.pause)
		}
	}
}
