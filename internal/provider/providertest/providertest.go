// Package providertest is the conformance suite every provider adapter
// passes. The suite starts a fake vendor server, scripts its answers, and
// asserts that the adapter classifies each one the same way as every other
// adapter does, and that every attempt carries the gateway's message id as
// the vendor's reference / idempotency key.
//
// An adapter's test supplies a Harness: how to decode a request in the
// vendor's wire format, how the vendor writes each kind of answer, and how
// to build the adapter pointed at the fake. Transport failures (hanging,
// closing the connection, refusing it) are the suite's own business.
package providertest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// Kind is one kind of scripted vendor answer.
type Kind int

const (
	// Accept is the vendor's success answer carrying Step.ProviderID.
	Accept Kind = iota
	// Throttle is HTTP 429 with the header Retry-After: Step.RetryAfter
	// (no header when empty) and the vendor's error body.
	Throttle
	// VendorThrottle is the vendor's own throttle signal, without a
	// Retry-After header (Twilio: 429 + code 20429; Vonage: HTTP 200 with
	// message status "1"; generic: a bare 429).
	VendorThrottle
	// Unavailable is HTTP Step.Status (5xx) with the vendor's error body.
	Unavailable
	// Rejected is the vendor's permanent refusal of this message (an invalid
	// number or parameter).
	Rejected
	// Unauthorized is the vendor's answer to wrong credentials.
	Unauthorized
	// Suspended is the vendor's "account suspended" (the simulator's 403
	// {"error":"account suspended"}; Twilio 20005; Vonage status 8), with
	// Retry-After: Step.RetryAfter when the vendor can send one.
	Suspended
	// Garbage is a 2xx whose body cannot be parsed.
	Garbage
	// Hang reads the request and never answers until the client gives up.
	Hang
	// CloseConn reads the request and closes the connection unanswered.
	CloseConn
)

// Step is one scripted answer.
type Step struct {
	Kind       Kind
	RetryAfter string // Throttle, Suspended: Retry-After header value, "" for none
	Status     int    // Unavailable: the 5xx to answer
	ProviderID string // Accept: the id to answer with
}

// Sent is what the fake vendor received in one request, decoded from the
// vendor's wire format by the harness.
type Sent struct {
	To             string // as the vendor received it (a leading '+' may be missing)
	From           string
	Body           string
	Reference      string // where the vendor carries our reference (client-ref, "reference")
	IdempotencyKey string // the Idempotency-Key header, "" when absent
	Authorized     bool   // the credentials match the ones the harness built the adapter with
}

// Harness adapts the suite to one vendor.
type Harness struct {
	// Decode parses one request in the vendor's wire format (method, path,
	// content type, auth, fields). It returns an error for anything the real
	// vendor would not accept as a well-formed send.
	Decode func(r *http.Request) (Sent, error)
	// Respond writes the vendor's answer for every Kind up to Garbage.
	Respond func(w http.ResponseWriter, s Step)
	// New builds the adapter pointed at the fake server's base URL with the
	// given per-attempt timeout (0: the adapter's default).
	New func(t *testing.T, baseURL string, timeout time.Duration) provider.Provider
	// IdempotencyHeader says the adapter must send Idempotency-Key.
	IdempotencyHeader bool
	// Secrets must never appear in an error message (auth token, api secret).
	Secrets []string
}

// fake is the scripted vendor server.
type fake struct {
	h    Harness
	srv  *httptest.Server
	stop chan struct{}

	mu    sync.Mutex
	steps []Step
	sent  []Sent
	errs  []error
}

func newFake(t *testing.T, h Harness, steps ...Step) *fake {
	t.Helper()
	f := &fake{h: h, steps: steps, stop: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		close(f.stop) // release handlers still hanging
		f.srv.Close()
	})
	return f
}

func (f *fake) serve(w http.ResponseWriter, r *http.Request) {
	s, err := f.h.Decode(r)
	f.mu.Lock()
	if err != nil {
		f.errs = append(f.errs, err)
	} else {
		f.sent = append(f.sent, s)
	}
	// The last step repeats, so a transport that retries on its own sees
	// the same behaviour again.
	step := f.steps[min(len(f.sent)+len(f.errs)-1, len(f.steps)-1)]
	f.mu.Unlock()
	if err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	switch step.Kind {
	case Hang:
		select {
		case <-r.Context().Done():
		case <-f.stop:
		}
	case CloseConn:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic("providertest: hijack: " + err.Error()) // httptest always supports it
		}
		_ = conn.Close()
	default:
		f.h.Respond(w, step)
	}
}

func (f *fake) requests() ([]Sent, []error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Sent(nil), f.sent...), append([]error(nil), f.errs...)
}

// want is the expected classification of one answer.
type want struct {
	ok         bool
	reason     provider.Reason
	temporary  bool
	status     int           // 0: not checked
	retryAfter time.Duration // exact when > 0
	raMin      time.Duration // range check when raMax > 0
	raMax      time.Duration
}

// Run runs the conformance suite against the adapter h builds: every
// outcome of outcomeCases, then timeouts, a refused connection and retries.
func Run(t *testing.T, h Harness) {
	for _, tc := range outcomeCases(time.Now()) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, h, tc.step)
			p := build(t, h, f.srv.URL, 5*time.Second)
			req := newRequest()
			res, err := p.Send(context.Background(), req)
			check(t, h, tc.want, res, err, tc.step.ProviderID)
			checkSent(t, h, f, req, 1)
		})
	}
	t.Run("hang beyond adapter timeout", func(t *testing.T) { testAdapterTimeout(t, h) })
	t.Run("hang beyond caller deadline", func(t *testing.T) { testCallerDeadline(t, h) })
	t.Run("connection refused", func(t *testing.T) { testConnectionRefused(t, h) })
	t.Run("same reference on every attempt", func(t *testing.T) { testSameReference(t, h) })
	t.Run("no replay by the transport", func(t *testing.T) { testNoTransportReplay(t, h) })
}

// testNoTransportReplay: a kept-alive connection that dies after the
// request went out is an unknown outcome for the caller, never a request
// the adapter's HTTP client sends again by itself (Go's transport does so
// for a POST that carries an Idempotency-Key): a replay reaches the
// vendor unpaced by the limiter, and one that ignores the key delivers the
// message twice. Two sends: two requests.
func testNoTransportReplay(t *testing.T, h Harness) {
	t.Parallel()
	f := newFake(t, h, Step{Kind: Accept, ProviderID: "prov-1"}, Step{Kind: CloseConn})
	p := build(t, h, f.srv.URL, 5*time.Second)
	if _, err := p.Send(context.Background(), newRequest()); err != nil {
		t.Fatal(err)
	}
	_, err := p.Send(context.Background(), newRequest())
	if pe := provider.AsError(err); pe == nil || !pe.Temporary || pe.NotSent {
		t.Errorf("connection dropped after the request: %v, want a temporary error that may have been sent", err)
	}
	if sent, _ := f.requests(); len(sent) != 2 {
		t.Errorf("the vendor received %d requests for 2 sends", len(sent))
	}
}

// outcomeCase is one answer of the fake provider and the classification
// the adapter must give it.
type outcomeCase struct {
	name string
	step Step
	want want
}

// outcomeCases is the table of single-answer outcomes; now dates the
// HTTP-date Retry-After.
func outcomeCases(now time.Time) []outcomeCase {
	httpDate := now.Add(5 * time.Second).UTC().Format(http.TimeFormat)
	return []outcomeCase{
		{"accept", Step{Kind: Accept, ProviderID: "prov-42"}, want{ok: true}},
		{"429 retry-after seconds", Step{Kind: Throttle, RetryAfter: "7"},
			want{reason: provider.ReasonThrottled, temporary: true, status: 429, retryAfter: 7 * time.Second}},
		{"429 retry-after http-date", Step{Kind: Throttle, RetryAfter: httpDate},
			want{reason: provider.ReasonThrottled, temporary: true, status: 429, raMin: time.Second, raMax: 6 * time.Second}},
		{"429 retry-after missing", Step{Kind: Throttle},
			want{reason: provider.ReasonThrottled, temporary: true, status: 429, retryAfter: provider.MinRetryAfter}},
		{"429 retry-after garbage", Step{Kind: Throttle, RetryAfter: "soon, maybe"},
			want{reason: provider.ReasonThrottled, temporary: true, status: 429, retryAfter: provider.MinRetryAfter}},
		{"429 retry-after zero", Step{Kind: Throttle, RetryAfter: "0"},
			want{reason: provider.ReasonThrottled, temporary: true, status: 429, retryAfter: provider.MinRetryAfter}},
		{"429 retry-after negative", Step{Kind: Throttle, RetryAfter: "-3"},
			want{reason: provider.ReasonThrottled, temporary: true, status: 429, retryAfter: provider.MinRetryAfter}},
		{"429 retry-after absurd", Step{Kind: Throttle, RetryAfter: "86400000"},
			want{reason: provider.ReasonThrottled, temporary: true, status: 429, retryAfter: provider.MaxRetryAfter}},
		{"vendor throttle", Step{Kind: VendorThrottle},
			want{reason: provider.ReasonThrottled, temporary: true, retryAfter: provider.MinRetryAfter}},
		{"503", Step{Kind: Unavailable, Status: 503},
			want{reason: provider.ReasonUnavailable, temporary: true, status: 503}},
		{"500", Step{Kind: Unavailable, Status: 500},
			want{reason: provider.ReasonUnavailable, temporary: true, status: 500}},
		{"rejected", Step{Kind: Rejected}, want{reason: provider.ReasonRejected}},
		{"unauthorized", Step{Kind: Unauthorized}, want{reason: provider.ReasonAuth}},
		{"suspended", Step{Kind: Suspended, RetryAfter: "120"},
			want{reason: provider.ReasonSuspended, temporary: true, raMin: provider.MinRetryAfter, raMax: provider.MaxRetryAfter}},
		{"2xx garbage", Step{Kind: Garbage}, want{reason: provider.ReasonBadResponse, temporary: true}},
		{"close connection", Step{Kind: CloseConn}, want{reason: provider.ReasonNetwork, temporary: true}},
	}
}

// testAdapterTimeout: a provider that never answers times out at the
// adapter's own timeout.
func testAdapterTimeout(t *testing.T, h Harness) {
	t.Parallel()
	f := newFake(t, h, Step{Kind: Hang})
	p := build(t, h, f.srv.URL, 200*time.Millisecond)
	req := newRequest()
	res, err := p.Send(context.Background(), req)
	check(t, h, want{reason: provider.ReasonTimeout, temporary: true}, res, err, "")
	checkSent(t, h, f, req, 1)
}

// testCallerDeadline: a provider that never answers times out at the
// caller's deadline, well before the adapter's timeout.
func testCallerDeadline(t *testing.T, h Harness) {
	t.Parallel()
	f := newFake(t, h, Step{Kind: Hang})
	p := build(t, h, f.srv.URL, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req := newRequest()
	res, err := p.Send(ctx, req)
	check(t, h, want{reason: provider.ReasonTimeout, temporary: true}, res, err, "")
	checkSent(t, h, f, req, 1)
}

// testConnectionRefused: nothing listens at the URL.
func testConnectionRefused(t *testing.T, h Harness) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	p := build(t, h, url, 5*time.Second)
	res, err := p.Send(context.Background(), newRequest())
	check(t, h, want{reason: provider.ReasonNetwork, temporary: true}, res, err, "")
}

// testSameReference: every retry of one message carries the same reference
// (the provider's idempotency key), whatever failed before.
func testSameReference(t *testing.T, h Harness) {
	t.Parallel()
	f := newFake(t, h,
		Step{Kind: Unavailable, Status: 503},
		Step{Kind: Throttle, RetryAfter: "1"},
		Step{Kind: Garbage},
		Step{Kind: CloseConn},
		Step{Kind: Accept, ProviderID: "prov-7"})
	p := build(t, h, f.srv.URL, 5*time.Second)
	req := newRequest()
	var res provider.Result
	var err error
	attempts := 0
	for attempts = 1; attempts <= 5; attempts++ {
		if res, err = p.Send(context.Background(), req); err == nil {
			break
		}
		if pe := provider.AsError(err); pe == nil || !pe.Temporary {
			t.Fatalf("attempt %d: %v, want a temporary *provider.Error", attempts, err)
		}
	}
	if err != nil || res.ProviderID != "prov-7" {
		t.Fatalf("after %d attempts: %+v, %v; want prov-7", attempts, res, err)
	}
	checkSent(t, h, f, req, 5)
}

func build(t *testing.T, h Harness, url string, timeout time.Duration) provider.Provider {
	t.Helper()
	p := h.New(t, url, timeout)
	if p.Name() == "" {
		t.Error("Name() is empty")
	}
	if c, ok := p.(interface{ CloseIdleConnections() }); ok {
		t.Cleanup(c.CloseIdleConnections)
	}
	return p
}

func newRequest() *provider.Request {
	return &provider.Request{ID: sms.NewID(time.Now()), To: "+819012345678", From: "SMSGW",
		Body: "Your code is 123456", Segments: 1, Class: sms.ClassOTP}
}

func check(t *testing.T, h Harness, w want, res provider.Result, err error, providerID string) {
	t.Helper()
	if w.ok {
		if err != nil {
			t.Fatalf("Send: %v, want success", err)
		}
		if res.ProviderID != providerID {
			t.Fatalf("ProviderID = %q, want %q", res.ProviderID, providerID)
		}
		return
	}
	if err == nil {
		t.Fatalf("Send succeeded with %+v, want %s", res, w.reason)
	}
	pe := provider.AsError(err)
	if pe == nil {
		t.Fatalf("Send error %T %v is not a *provider.Error", err, err)
	}
	if pe.Reason != w.reason || pe.Temporary != w.temporary {
		t.Errorf("classified as %s temporary=%v (%v), want %s temporary=%v",
			pe.Reason, pe.Temporary, pe, w.reason, w.temporary)
	}
	if w.status != 0 && pe.Status != w.status {
		t.Errorf("Status = %d, want %d", pe.Status, w.status)
	}
	switch {
	case w.retryAfter > 0 && pe.RetryAfter != w.retryAfter:
		t.Errorf("RetryAfter = %v, want %v", pe.RetryAfter, w.retryAfter)
	case w.raMax > 0 && (pe.RetryAfter < w.raMin || pe.RetryAfter > w.raMax):
		t.Errorf("RetryAfter = %v, want within [%v, %v]", pe.RetryAfter, w.raMin, w.raMax)
	case w.reason != provider.ReasonThrottled && w.reason != provider.ReasonSuspended && w.reason != provider.ReasonQueueFull && pe.RetryAfter != 0:
		t.Errorf("RetryAfter = %v on a %s; only throttles, suspensions and full vendor queues pause everyone", pe.RetryAfter, pe.Reason)
	}
	for _, s := range h.Secrets {
		if s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("error %q contains a secret", err)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) && pe.Reason != provider.ReasonTimeout {
		t.Errorf("a deadline error classified as %s", pe.Reason)
	}
}

// checkSent asserts the fake received n well-formed requests, each carrying
// the message and its id as reference (and idempotency key).
func checkSent(t *testing.T, h Harness, f *fake, req *provider.Request, n int) {
	t.Helper()
	sent, errs := f.requests()
	for _, err := range errs {
		t.Errorf("vendor could not decode a request: %v", err)
	}
	if len(sent) != n {
		t.Errorf("vendor received %d requests, want %d", len(sent), n)
	}
	for i, s := range sent {
		if s.Reference != req.ID {
			t.Errorf("attempt %d: reference %q, want the message id %q", i+1, s.Reference, req.ID)
		}
		if h.IdempotencyHeader && s.IdempotencyKey != req.ID {
			t.Errorf("attempt %d: Idempotency-Key %q, want %q", i+1, s.IdempotencyKey, req.ID)
		}
		if s.IdempotencyKey != "" && s.IdempotencyKey != req.ID {
			t.Errorf("attempt %d: Idempotency-Key %q differs from the message id %q", i+1, s.IdempotencyKey, req.ID)
		}
		if !s.Authorized {
			t.Errorf("attempt %d: credentials missing or wrong", i+1)
		}
		if strings.TrimPrefix(s.To, "+") != strings.TrimPrefix(req.To, "+") || s.Body != req.Body || s.From != req.From {
			t.Errorf("attempt %d: vendor got to=%q from=%q body=%q, want %q %q %q",
				i+1, s.To, s.From, s.Body, req.To, req.From, req.Body)
		}
	}
}
