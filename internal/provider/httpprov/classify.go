package httpprov

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// The helpers in this file are shared by every HTTP-based adapter (this
// package, twilio, vonage) so that the same transport failure or status code
// is classified the same way whichever vendor is behind it.

// MaxBody is how much of a response body an adapter reads. Answers are tiny;
// a larger body is a misbehaving proxy and is not worth buffering.
const MaxBody = 64 << 10

// SuspendedPause is the pause taken for an account suspension signalled
// without a Retry-After (Twilio 20005, Vonage status 8). Pausing only the 1 s
// floor would poll a suspended account every second from every replica.
const SuspendedPause = time.Minute

// NewClient returns the client an adapter uses when none is configured: its
// own transport with enough idle connections per host for a hundred sends a
// second. The default transport keeps only two idle connections per host,
// which at that rate means a new TCP (and TLS) handshake for most sends and
// thousands of sockets in TIME_WAIT.
func NewClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 256
	tr.MaxIdleConnsPerHost = 128
	tr.IdleConnTimeout = 90 * time.Second
	return &http.Client{
		Transport: tr,
		// A provider that redirects a POST is misconfigured; following it
		// would silently turn the send into a GET.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// ReadBody reads at most MaxBody bytes of resp's body, then drains a bounded
// remainder and closes it so the connection can be reused.
func ReadBody(resp *http.Response) ([]byte, error) {
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxBody))
		_ = resp.Body.Close()
	}()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	if err != nil {
		return b, fmt.Errorf("read response body: %w", err)
	}
	return b, nil
}

// TransportError classifies a failure of client.Do (or of reading a body):
// a deadline or cancellation is a timeout (the provider may have acted on
// the request, so the retry must carry the same key); anything else
// (refused, reset, EOF, DNS) is a network error, NotSent when the dial or
// the name lookup failed (the request never left). The message never
// includes the request URL, which may carry an account id or credentials.
func TransportError(ctx context.Context, err error) *provider.Error {
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = ue.Err.Error()
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		ctx.Err() != nil, errors.As(err, &ne) && ne.Timeout():
		return &provider.Error{Reason: provider.ReasonTimeout, Temporary: true, Message: Safe(msg)}
	}
	var op *net.OpError
	var dns *net.DNSError
	notSent := errors.As(err, &dns) || errors.As(err, &op) && op.Op == "dial"
	return &provider.Error{Reason: provider.ReasonNetwork, Temporary: true, NotSent: notSent, Message: Safe(msg)}
}

// StatusError classifies a non-2xx answer by its status code alone. Adapters
// first look for vendor signals in the body (suspension, vendor throttle
// codes) and fall back to this. msg is a short vendor description.
func StatusError(status int, h http.Header, now time.Time, msg string) *provider.Error {
	e := &provider.Error{Status: status, Message: Safe(msg)}
	switch {
	case status == http.StatusTooManyRequests:
		e.Reason, e.Temporary = provider.ReasonThrottled, true
		e.RetryAfter = provider.ParseRetryAfter(h.Get("Retry-After"), now)
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		e.Reason = provider.ReasonAuth
	case status == http.StatusRequestTimeout, status == http.StatusConflict, status == http.StatusTooEarly:
		// "Not now", not "never": 408, the server stopped waiting for the
		// request (RFC 9110 15.5.9); 409, the Idempotency-Key draft's
		// answer to a retry while the first request with the key is still
		// processed (the message may be on its way); 425 (RFC 8470). A
		// retry with the same key settles each; failing the message would
		// lose it, or call failed one the provider delivers.
		e.Reason, e.Temporary = provider.ReasonUnavailable, true
	case status >= 400 && status < 500:
		e.Reason = provider.ReasonRejected
	default:
		// 5xx, and also 1xx/3xx which no provider should answer to a send:
		// most likely a proxy in between, so retry rather than fail messages.
		e.Reason, e.Temporary = provider.ReasonUnavailable, true
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	return e
}

// Suspended builds the error for an account suspension: a pause for every
// sender (Retry-After when the vendor gives a time, SuspendedPause when it
// gives none or an unreadable one)
// and a requeue, not a failed message.
func Suspended(status int, h http.Header, now time.Time, msg string) *provider.Error {
	ra, given := provider.RetryAfterGiven(h.Get("Retry-After"), now)
	if !given {
		// Missing or unreadable ("0", garbage, a date past): the minute,
		// not the 1 s floor that would poll a suspended account every
		// second from every replica.
		ra = SuspendedPause
	}
	return &provider.Error{Reason: provider.ReasonSuspended, Temporary: true,
		RetryAfter: ra, Status: status, Message: Safe(msg)}
}

// BadResponse is a 2xx we could not understand: the provider probably took
// the message, but we cannot tell, so it is retried with the same key.
func BadResponse(status int, msg string) *provider.Error {
	return &provider.Error{Reason: provider.ReasonBadResponse, Temporary: true,
		Status: status, Message: Safe(msg)}
}

// Safe shortens a vendor-supplied text and strips control characters so it
// can go into an error, a log line or a metric-free status field.
func Safe(s string) string {
	const limit = 200
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.TrimSpace(s))
	if len(s) > limit {
		// Cut on a rune boundary.
		cut := limit
		for cut > 0 && !utf8Start(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// WithTimeout applies an adapter's per-attempt timeout on top of ctx. The
// shorter of the two wins, so a dispatcher deadline is always honoured.
func WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		d = defaultTimeout
	}
	return context.WithTimeout(ctx, d)
}

// FormPost is a POST of form to endpoint that asks for JSON: how the vendor
// adapters call their SMS APIs.
func FormPost(ctx context.Context, endpoint string, form url.Values) (*http.Request, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	hreq.Header.Set("Accept", "application/json")
	return hreq, nil
}

// LogSendFailure logs a vendor adapter's failed send of req at DEBUG: the
// line gets the error's text scrubbed of the message's body, which a
// vendor may quote (docs/design.md section 6); the caller scrubs what it
// keeps itself.
func LogSendFailure(log *slog.Logger, vendor string, req *provider.Request, err error) {
	if pe := provider.AsError(provider.Scrubbed(err, req.Body)); pe != nil {
		log.Debug("provider send failed", "provider", vendor, "id", req.ID, "to", sms.MaskPhone(req.To),
			"reason", pe.Reason, "status", pe.Status, "error", pe.Message)
	}
}

// FormSend is one send of a vendor adapter: a form POST to its SMS API.
type FormSend struct {
	Vendor   string // the adapter's name, for errors and the log
	Client   *http.Client
	Endpoint string
	Timeout  time.Duration // the per-attempt timeout (WithTimeout)
	Log      *slog.Logger
	// Authorize, when not nil, adds the account's credentials to the request.
	Authorize func(*http.Request)
}

// Do posts form for req within the timeout and hands the answer to read:
// the response (its body already read and closed), the body, and the error
// of reading it, which read reports where it needs the body. A transport
// failure is classified by TransportError. A failed send is logged with
// LogSendFailure, so every adapter scrubs and logs its failures alike.
func (s FormSend) Do(ctx context.Context, req *provider.Request, form url.Values,
	read func(resp *http.Response, body []byte, readErr error) (provider.Result, error)) (provider.Result, error) {
	res, err := s.post(ctx, form, read)
	LogSendFailure(s.Log, s.Vendor, req, err)
	return res, err
}

func (s FormSend) post(ctx context.Context, form url.Values,
	read func(resp *http.Response, body []byte, readErr error) (provider.Result, error)) (provider.Result, error) {
	ctx, cancel := WithTimeout(ctx, s.Timeout)
	defer cancel()
	hreq, err := FormPost(ctx, s.Endpoint, form)
	if err != nil {
		return provider.Result{}, fmt.Errorf("%s: build request: %w", s.Vendor, err)
	}
	if s.Authorize != nil {
		s.Authorize(hreq)
	}
	resp, err := s.Client.Do(hreq) //nolint:bodyclose // ReadBody closes it, on every path
	if err != nil {
		return provider.Result{}, TransportError(ctx, err)
	}
	body, rerr := ReadBody(resp)
	return read(resp, body, rerr)
}
