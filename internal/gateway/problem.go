package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5/middleware"

	"smsgw/internal/dispatch"
	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// Kind is the closed set of ways a request can fail. Each maps to one HTTP
// status and one problem type; it doubles as the rejection metric label.
type Kind string

// The kinds, each with its HTTP status.
const (
	KindInvalid            Kind = "invalid"                  // 400: a field or the JSON is wrong
	KindUnauthorized       Kind = "unauthorized"             // 401: no or unknown bearer key
	KindForbidden          Kind = "forbidden"                // 403: the key may not do this (class, admin)
	KindNotFound           Kind = "not-found"                // 404
	KindMethodNotAllowed   Kind = "method-not-allowed"       // 405
	KindInFlight           Kind = "idempotency-in-flight"    // 409: same Idempotency-Key still being processed
	KindTooLarge           Kind = "too-large"                // 413
	KindUnsupportedMedia   Kind = "unsupported-media-type"   // 415
	KindKeyReused          Kind = "idempotency-key-reused"   // 422: same Idempotency-Key, different request
	KindRateLimited        Kind = "rate-limited"             // 429: ingress GCRA
	KindTooManyQueued      Kind = "too-many-outstanding"     // 429: max_outstanding
	KindExpiresBeforeSend  Kind = "would-expire-before-send" // 429: TTL shorter than the backlog ahead
	KindRejected           Kind = "rejected-by-provider"     // 422: the provider refused the message for good
	KindCallbackNotAllowed Kind = "callback-url-not-allowed" // 422: callback_url under none of the producer's webhook.allow prefixes
	KindUnavailable        Kind = "unavailable"              // 503: OTP could not be sent in time, shutting down, store down
	KindInternal           Kind = "internal"                 // 500: anything we did not expect
	KindAuthThrottled      Kind = "too-many-auth-failures"   // 429: this client address failed to authenticate too often
	KindBadSignature       Kind = "bad-signature"            // 401: a provider receipt's signature is missing or wrong
	KindNotCancelable      Kind = "not-cancelable"           // 409: the message is sending or done
	// KindDestinationNotAllowed and the next four are protection's
	// (protection.go): refused before any quota, queue or provider.
	KindDestinationNotAllowed Kind = "destination-not-allowed" // 422: region not in protection.countries
	KindNumberTypeBlocked     Kind = "number-type-blocked"     // 422: type in protection.block_number_types
	KindSuppressed            Kind = "suppressed"              // 422: the number is on the suppression list
	KindOTPNumberLimited      Kind = "otp-number-limited"      // 429: protection.otp_per_number
	KindSuppressionsFull      Kind = "suppression-list-full"   // 409: protection.max_suppressions reached
)

// Kinds lists every Kind, for creating metric label sets at zero.
var Kinds = []Kind{KindInvalid, KindUnauthorized, KindForbidden, KindNotFound, KindMethodNotAllowed,
	KindInFlight, KindTooLarge, KindUnsupportedMedia, KindKeyReused, KindRateLimited, KindTooManyQueued,
	KindExpiresBeforeSend, KindRejected, KindCallbackNotAllowed, KindUnavailable, KindInternal, KindBadSignature, KindNotCancelable,
	KindDestinationNotAllowed, KindNumberTypeBlocked, KindSuppressed, KindOTPNumberLimited, KindSuppressionsFull, KindAuthThrottled}

var kindInfo = map[Kind]struct {
	status int
	title  string
}{
	KindInvalid:            {http.StatusBadRequest, "Invalid request"},
	KindUnauthorized:       {http.StatusUnauthorized, "Missing or unknown API key"},
	KindForbidden:          {http.StatusForbidden, "Not allowed for this API key"},
	KindNotFound:           {http.StatusNotFound, "Not found"},
	KindMethodNotAllowed:   {http.StatusMethodNotAllowed, "Method not allowed"},
	KindInFlight:           {http.StatusConflict, "A request with this Idempotency-Key is still being processed"},
	KindTooLarge:           {http.StatusRequestEntityTooLarge, "Request body too large"},
	KindUnsupportedMedia:   {http.StatusUnsupportedMediaType, "Unsupported content type"},
	KindKeyReused:          {http.StatusUnprocessableEntity, "Idempotency-Key reused with a different request"},
	KindRateLimited:        {http.StatusTooManyRequests, "Ingress rate limit exceeded"},
	KindTooManyQueued:      {http.StatusTooManyRequests, "Too many messages outstanding"},
	KindExpiresBeforeSend:  {http.StatusTooManyRequests, "Message would expire before its turn"},
	KindRejected:           {http.StatusUnprocessableEntity, "The provider rejected the message"},
	KindCallbackNotAllowed: {http.StatusUnprocessableEntity, "callback_url is not allowed for this producer"},
	KindUnavailable:        {http.StatusServiceUnavailable, "Service unavailable"},
	KindInternal:           {http.StatusInternalServerError, "Internal server error"},
	KindAuthThrottled:      {http.StatusTooManyRequests, "Too many failed authentications"},
	KindBadSignature:       {http.StatusUnauthorized, "Receipt signature missing or wrong"},
	KindNotCancelable:      {http.StatusConflict, "The message is sending or done and can no longer be canceled"},

	KindDestinationNotAllowed: {http.StatusUnprocessableEntity, "Destination region not allowed"},
	KindNumberTypeBlocked:     {http.StatusUnprocessableEntity, "Number type blocked"},
	KindSuppressed:            {http.StatusUnprocessableEntity, "Number is suppressed"},
	KindOTPNumberLimited:      {http.StatusTooManyRequests, "Too many OTPs to this number"},
	KindSuppressionsFull:      {http.StatusConflict, "The suppression list is full"},
}

// ProblemTypeBase prefixes every problem type URI.
const ProblemTypeBase = "urn:smsgw:problem:"

// FieldError names one invalid field of a request.
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// Error is a failure the API reports to the client as it is. Handlers return
// it (or *sms.ValidationError, or queue sentinels); writeError is the one
// place any error becomes an HTTP answer.
type Error struct {
	Kind       Kind
	Detail     string        // safe to show the client
	Fields     []FieldError  // for KindInvalid
	RetryAfter time.Duration // for 409, 429, 503
	Extra      map[string]any
	Err        error // cause, logged, never shown
}

func (e *Error) Error() string {
	s := string(e.Kind)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

func errorf(kind Kind, detail string) *Error { return &Error{Kind: kind, Detail: detail} }

func fieldError(field, reason string) *Error {
	return &Error{Kind: KindInvalid, Detail: field + ": " + reason, Fields: []FieldError{{field, reason}}}
}

// problem is the RFC 9457 body, with our extensions.
type problem struct {
	Type      string         `json:"type"`
	Title     string         `json:"title"`
	Status    int            `json:"status"`
	Detail    string         `json:"detail,omitempty"`
	Instance  string         `json:"instance,omitempty"`
	RequestID string         `json:"request_id,omitempty"`
	Errors    []FieldError   `json:"errors,omitempty"`
	Extra     map[string]any `json:"-"`
}

func (p problem) MarshalJSON() ([]byte, error) {
	type plain problem
	b, err := json.Marshal(plain(p))
	if err != nil || len(p.Extra) == 0 {
		return b, err
	}
	extra, err := json.Marshal(p.Extra)
	if err != nil {
		return nil, err
	}
	// Splice the extension members into the object: drop its closing
	// brace, then append ',' and the members with theirs.
	b = append(b[:len(b)-1], ',')
	return append(b, extra[1:]...), nil
}

// toError classifies any error into an *Error. Unknown errors become
// KindInternal with the cause kept for the log.
func toError(err error) *Error {
	var e *Error
	var ve *sms.ValidationError
	var mbe *http.MaxBytesError
	var noSlot dispatch.NoSlotError
	pe := provider.AsError(err)
	switch {
	case errors.As(err, &e):
		return e
	case errors.As(err, &ve):
		return &Error{Kind: KindInvalid, Detail: ve.Error(), Fields: []FieldError{{ve.Field, ve.Reason}}}
	case errors.As(err, &mbe):
		return &Error{Kind: KindTooLarge, Detail: "the request body is larger than " + strconv.FormatInt(mbe.Limit, 10) + " bytes", Err: err}
	case errors.As(err, &noSlot):
		return &Error{Kind: KindUnavailable, RetryAfter: noSlot.RetryAfter, Err: err,
			Detail: "no send slot within the deadline (" + noSlot.Reason + "); nothing was sent or queued"}
	case errors.Is(err, dispatch.ErrOutcomeUnknown):
		return &Error{Kind: KindUnavailable, RetryAfter: time.Second, Err: err,
			Detail: "the provider did not answer within the deadline: the message may or may not have been sent; nothing was queued"}
	case errors.Is(err, dispatch.ErrUnavailable):
		return &Error{Kind: KindUnavailable, RetryAfter: time.Second, Err: err,
			Detail: "the provider is unavailable; nothing was sent or queued"}
	case errors.Is(err, limiter.ErrCostExceedsBurst):
		return &Error{Kind: KindInvalid, Err: err, Detail: "body: too many segments to send at once",
			Fields: []FieldError{{"body", "needs more segments than the provider rate allows at once"}}}
	case pe != nil && pe.Reason == provider.ReasonPartial:
		return &Error{Kind: KindRejected, Err: err,
			Detail: "the provider accepted only some parts of the message; they may arrive, the rest will not, and it is not sent again"}
	case pe != nil && !pe.Temporary:
		return &Error{Kind: KindRejected, Err: err, Detail: "the provider refused the message (" + string(pe.Reason) + ")"}
	case pe != nil:
		return &Error{Kind: KindUnavailable, RetryAfter: max(time.Second, pe.RetryAfter), Err: err,
			Detail: "the provider failed (" + string(pe.Reason) + "); nothing was queued"}
	case errors.Is(err, queue.ErrNotFound):
		return &Error{Kind: KindNotFound, Detail: "no such message", Err: err}
	case errors.Is(err, queue.ErrNotReplicated):
		return &Error{Kind: KindUnavailable, RetryAfter: time.Second, Err: err,
			Detail: "the message store's replicas did not confirm the message in time; it may be queued: retry with the same Idempotency-Key"}
	case errors.Is(err, queue.ErrClosed):
		return &Error{Kind: KindUnavailable, Detail: "the gateway is shutting down", RetryAfter: time.Second, Err: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Kind: KindUnavailable, Detail: "the gateway did not answer in time", RetryAfter: time.Second, Err: err}
	case dependencyDown(err):
		return &Error{Kind: KindUnavailable, Detail: "a dependency of the gateway is down or slow; retry later",
			RetryAfter: outageRetryAfter, Err: err}
	}
	return &Error{Kind: KindInternal, Err: err}
}

// writeError answers err as application/problem+json. Internal errors are
// logged in full and shown to the client without detail.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	p, e := s.problemOf(r, err)
	s.writeProblem(w, p, e)
}

// writeProblem writes a problem body built by problemOf or problemFor,
// with the headers its kind promises.
func (s *server) writeProblem(w http.ResponseWriter, p problem, e *Error) {
	h := w.Header()
	if e.RetryAfter > 0 {
		h.Set("Retry-After", retryAfterSeconds(e.RetryAfter))
	}
	if e.Kind == KindUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="smsgw"`)
	}
	writeJSON(w, s.log, "application/problem+json", p.Status, p)
}

// problemFor builds the problem body of e (a Kind of kindInfo) for r,
// without logging or counting it.
func problemFor(r *http.Request, e *Error) problem {
	info := kindInfo[e.Kind]
	switch info.status {
	case http.StatusConflict, http.StatusTooManyRequests, http.StatusServiceUnavailable:
		// The contract promises Retry-After on these, at least 1 s.
		e.RetryAfter = max(e.RetryAfter, time.Second)
	}
	p := problem{
		Type:      ProblemTypeBase + string(e.Kind),
		Title:     info.title,
		Status:    info.status,
		Detail:    e.Detail,
		Instance:  r.URL.Path,
		RequestID: middleware.GetReqID(r.Context()),
		Errors:    e.Fields,
		Extra:     e.Extra,
	}
	if e.RetryAfter > 0 {
		if p.Extra == nil {
			p.Extra = map[string]any{}
		}
		p.Extra["retry_after_seconds"] = ceilSeconds(e.RetryAfter)
	}
	return p
}

// problemOf classifies err, logs what the client will not see, counts the
// rejection and returns the problem body.
func (s *server) problemOf(r *http.Request, err error) (problem, *Error) {
	e := toError(err)
	if _, ok := kindInfo[e.Kind]; !ok {
		e = &Error{Kind: KindInternal, Err: err}
	}
	p := problemFor(r, e)
	if e.Kind == KindInternal {
		p.Detail = ""
		p.Errors = nil
		p.Extra = nil
		s.log.ErrorContext(r.Context(), "request failed", "method", methodLabel(r.Method), "path", logPath(r),
			"request_id", p.RequestID, "err", err)
	} else if e.Err != nil {
		s.log.WarnContext(r.Context(), "request refused", "kind", e.Kind, "method", methodLabel(r.Method), "path", logPath(r),
			"request_id", p.RequestID, "err", e.Err)
	}
	s.metrics.rejected.WithLabelValues(string(e.Kind)).Inc()
	return p, e
}

// retryAfterSeconds renders d as whole seconds, rounded up, at least 1: a
// client that waits exactly Retry-After must find the slot open.
func retryAfterSeconds(d time.Duration) string {
	return strconv.FormatInt(ceilSeconds(d), 10)
}

func ceilSeconds(d time.Duration) int64 {
	return max(1, int64(math.Ceil(d.Seconds())))
}

// writeJSON writes v with status. Encoding our own types cannot fail; if it
// does, the client gets an empty 500 and the log gets why.
func writeJSON(w http.ResponseWriter, log *slog.Logger, contentType string, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		log.Error("encode response", "err", err)
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	writeRaw(w, contentType, status, append(b, '\n'))
}

func writeRaw(w http.ResponseWriter, contentType string, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
