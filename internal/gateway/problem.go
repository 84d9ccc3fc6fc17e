package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5/middleware"

	"smsgw/internal/dispatch"
	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// problemKind is the closed set of ways a request can fail. Each maps to one HTTP
// status and one problem type; it doubles as the rejection metric label.
type problemKind string

// The kinds, each with its HTTP status.
const (
	kindInvalid            problemKind = "invalid"                  // 400: a field or the JSON is wrong
	kindUnauthorized       problemKind = "unauthorized"             // 401: no or unknown bearer key
	kindForbidden          problemKind = "forbidden"                // 403: the key may not do this (class, admin)
	kindNotFound           problemKind = "not-found"                // 404
	kindMethodNotAllowed   problemKind = "method-not-allowed"       // 405
	kindInFlight           problemKind = "idempotency-in-flight"    // 409: same Idempotency-Key still being processed
	kindTooLarge           problemKind = "too-large"                // 413
	kindUnsupportedMedia   problemKind = "unsupported-media-type"   // 415
	kindKeyReused          problemKind = "idempotency-key-reused"   // 422: same Idempotency-Key, different request
	kindRateLimited        problemKind = "rate-limited"             // 429: ingress GCRA
	kindTooManyQueued      problemKind = "too-many-outstanding"     // 429: max_outstanding
	kindExpiresBeforeSend  problemKind = "would-expire-before-send" // 429: TTL shorter than the backlog ahead
	kindRejected           problemKind = "rejected-by-provider"     // 422: the provider refused the message for good
	kindCallbackNotAllowed problemKind = "callback-url-not-allowed" // 422: callback_url under none of the producer's webhook.allow prefixes
	kindUnavailable        problemKind = "unavailable"              // 503: OTP could not be sent in time, shutting down, store down
	kindInternal           problemKind = "internal"                 // 500: anything we did not expect
	kindAuthThrottled      problemKind = "too-many-auth-failures"   // 429: this client address failed to authenticate too often
	kindBadSignature       problemKind = "bad-signature"            // 401: a provider webhook's (receipt, inbound message) signature is missing or wrong
	kindNotCancelable      problemKind = "not-cancelable"           // 409: the message is sending or done
	// kindDestinationNotAllowed and the next four are protection's
	// (protection.go): refused before any quota, queue or provider.
	kindDestinationNotAllowed problemKind = "destination-not-allowed" // 422: region not in protection.countries
	kindNumberTypeBlocked     problemKind = "number-type-blocked"     // 422: type in protection.block_number_types
	kindSuppressed            problemKind = "suppressed"              // 422: the number is on the suppression list
	kindOTPNumberLimited      problemKind = "otp-number-limited"      // 429: protection.otp_per_number
	kindSuppressionsFull      problemKind = "suppression-list-full"   // 409: protection.max_suppressions reached
)

// allKinds lists every Kind, for creating metric label sets at zero.
var allKinds = []problemKind{kindInvalid, kindUnauthorized, kindForbidden, kindNotFound, kindMethodNotAllowed,
	kindInFlight, kindTooLarge, kindUnsupportedMedia, kindKeyReused, kindRateLimited, kindTooManyQueued,
	kindExpiresBeforeSend, kindRejected, kindCallbackNotAllowed, kindUnavailable, kindInternal, kindBadSignature, kindNotCancelable,
	kindDestinationNotAllowed, kindNumberTypeBlocked, kindSuppressed, kindOTPNumberLimited, kindSuppressionsFull, kindAuthThrottled}

var kindInfo = map[problemKind]struct {
	status int
	title  string
}{
	kindInvalid:            {http.StatusBadRequest, "Invalid request"},
	kindUnauthorized:       {http.StatusUnauthorized, "Missing or unknown API key"},
	kindForbidden:          {http.StatusForbidden, "Not allowed for this API key"},
	kindNotFound:           {http.StatusNotFound, "Not found"},
	kindMethodNotAllowed:   {http.StatusMethodNotAllowed, "Method not allowed"},
	kindInFlight:           {http.StatusConflict, "A request with this Idempotency-Key is still being processed"},
	kindTooLarge:           {http.StatusRequestEntityTooLarge, "Request body too large"},
	kindUnsupportedMedia:   {http.StatusUnsupportedMediaType, "Unsupported content type"},
	kindKeyReused:          {http.StatusUnprocessableEntity, "Idempotency-Key reused with a different request"},
	kindRateLimited:        {http.StatusTooManyRequests, "Ingress rate limit exceeded"},
	kindTooManyQueued:      {http.StatusTooManyRequests, "Too many messages outstanding"},
	kindExpiresBeforeSend:  {http.StatusTooManyRequests, "Message would expire before its turn"},
	kindRejected:           {http.StatusUnprocessableEntity, "The provider rejected the message"},
	kindCallbackNotAllowed: {http.StatusUnprocessableEntity, "callback_url is not allowed for this producer"},
	kindUnavailable:        {http.StatusServiceUnavailable, "Service unavailable"},
	kindInternal:           {http.StatusInternalServerError, "Internal server error"},
	kindAuthThrottled:      {http.StatusTooManyRequests, "Too many failed authentications"},
	kindBadSignature:       {http.StatusUnauthorized, "Provider webhook signature missing or wrong"},
	kindNotCancelable:      {http.StatusConflict, "The message is sending or done and can no longer be canceled"},

	kindDestinationNotAllowed: {http.StatusUnprocessableEntity, "Destination region not allowed"},
	kindNumberTypeBlocked:     {http.StatusUnprocessableEntity, "Number type blocked"},
	kindSuppressed:            {http.StatusUnprocessableEntity, "Number is suppressed"},
	kindOTPNumberLimited:      {http.StatusTooManyRequests, "Too many OTPs to this number"},
	kindSuppressionsFull:      {http.StatusConflict, "The suppression list is full"},
}

// problemTypeBase prefixes every problem type URI.
const problemTypeBase = "urn:smsgw:problem:"

// fieldProblem names one invalid field of a request.
type fieldProblem struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// apiError is a failure the API reports to the client as it is. Handlers return
// it (or *sms.ValidationError, or queue sentinels); writeError is the one
// place any error becomes an HTTP answer.
type apiError struct {
	Kind       problemKind
	Detail     string         // safe to show the client
	Fields     []fieldProblem // for kindInvalid
	RetryAfter time.Duration  // for 409, 429, 503
	Extra      map[string]any
	Err        error // cause, logged, never shown
}

func (e *apiError) Error() string {
	s := string(e.Kind)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *apiError) Unwrap() error { return e.Err }

func errorf(kind problemKind, detail string) *apiError { return &apiError{Kind: kind, Detail: detail} }

func fieldError(field, reason string) *apiError {
	return &apiError{Kind: kindInvalid, Detail: field + ": " + reason, Fields: []fieldProblem{{field, reason}}}
}

// problem is the RFC 9457 body, with our extensions.
type problem struct {
	Type      string         `json:"type"`
	Title     string         `json:"title"`
	Status    int            `json:"status"`
	Detail    string         `json:"detail,omitempty"`
	Instance  string         `json:"instance,omitempty"`
	RequestID string         `json:"request_id,omitempty"`
	Errors    []fieldProblem `json:"errors,omitempty"`
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

// rejectionKinds is the problem kind of each of admission's refusals.
var rejectionKinds = map[rejectKind]problemKind{
	rejectDestination:  kindDestinationNotAllowed,
	rejectNumberType:   kindNumberTypeBlocked,
	rejectSuppressed:   kindSuppressed,
	rejectOTPPerNumber: kindOTPNumberLimited,
	rejectExpires:      kindExpiresBeforeSend,
	rejectUnavailable:  kindUnavailable,
}

// fromRejection is the one place an admission refusal becomes an answer.
func fromRejection(r *rejection) *apiError {
	kind, ok := rejectionKinds[r.Kind]
	if !ok {
		kind = kindInternal
	}
	e := &apiError{Kind: kind, Detail: r.Detail, RetryAfter: r.RetryAfter, Extra: r.Extra, Err: r.Err}
	for _, f := range r.Fields {
		e.Fields = append(e.Fields, fieldProblem{f.Field, f.Reason})
	}
	return e
}

// toError classifies any error into an *Error. Unknown errors become
// kindInternal with the cause kept for the log.
func toError(err error) *apiError {
	var e *apiError
	var rj *rejection
	var ve *sms.ValidationError
	var mbe *http.MaxBytesError
	var noSlot dispatch.NoSlotError
	pe := provider.AsError(err)
	switch {
	case errors.As(err, &e):
		return e
	case errors.As(err, &rj):
		return fromRejection(rj)
	case errors.As(err, &ve):
		return &apiError{Kind: kindInvalid, Detail: ve.Error(), Fields: []fieldProblem{{ve.Field, ve.Reason}}}
	case errors.As(err, &mbe):
		return &apiError{Kind: kindTooLarge, Detail: "the request body is larger than " + strconv.FormatInt(mbe.Limit, 10) + " bytes", Err: err}
	case errors.As(err, &noSlot):
		return &apiError{Kind: kindUnavailable, RetryAfter: noSlot.RetryAfter, Err: err,
			Detail: "no send slot within the deadline (" + noSlot.Reason + "); nothing was sent or queued"}
	case errors.Is(err, dispatch.ErrOutcomeUnknown):
		return &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err,
			Detail: "the provider did not answer within the deadline: the message may or may not have been sent; nothing was queued"}
	case errors.Is(err, dispatch.ErrUnavailable):
		return &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err,
			Detail: "the provider is unavailable; nothing was sent or queued"}
	case errors.Is(err, limiter.ErrCostExceedsBurst):
		return &apiError{Kind: kindInvalid, Err: err, Detail: "body: too many segments to send at once",
			Fields: []fieldProblem{{"body", "needs more segments than the provider rate allows at once"}}}
	case pe != nil && pe.Reason == provider.ReasonPartial:
		return &apiError{Kind: kindRejected, Err: err,
			Detail: "the provider accepted only some parts of the message; they may arrive, the rest will not, and it is not sent again"}
	case pe != nil && !pe.Temporary:
		return &apiError{Kind: kindRejected, Err: err, Detail: "the provider refused the message (" + string(pe.Reason) + ")"}
	case pe != nil:
		return &apiError{Kind: kindUnavailable, RetryAfter: max(time.Second, pe.RetryAfter), Err: err,
			Detail: "the provider failed (" + string(pe.Reason) + "); nothing was queued"}
	case errors.Is(err, queue.ErrNotFound):
		return &apiError{Kind: kindNotFound, Detail: "no such message", Err: err}
	case maybeStored(err): // a batch: the items' ids are not known to the client
		return &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err, Detail: maybeQueuedDetail}
	case errors.Is(err, queue.ErrClosed):
		return &apiError{Kind: kindUnavailable, Detail: "the gateway is shutting down", RetryAfter: time.Second, Err: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{Kind: kindUnavailable, Detail: "the gateway did not answer in time", RetryAfter: time.Second, Err: err}
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return &apiError{Kind: kindUnavailable, Detail: "the message store's disk is full; nothing was queued; retry later",
			RetryAfter: outageRetryAfter, Err: err}
	case dependencyDown(err):
		return &apiError{Kind: kindUnavailable, Detail: "a dependency of the gateway is down or slow; retry later",
			RetryAfter: outageRetryAfter, Err: err}
	}
	return &apiError{Kind: kindInternal, Err: err}
}

// maybeQueuedDetail answers a write the message store (or its replicas)
// did not confirm in time: unlike an outage, what was sent may be queued
// and then sent, so "retry later" alone would have a producer send it
// twice.
const maybeQueuedDetail = "the message store did not confirm in time: the message may be queued and sent; " +
	"retry with the same Idempotency-Key to find out (a retry without one may send it twice)"

// writeError answers err as application/problem+json. Internal errors are
// logged in full and shown to the client without detail.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	p, e := s.problemOf(r, err)
	s.writeProblem(w, p, e)
}

// writeProblem writes a problem body built by problemOf or problemFor,
// with the headers its kind promises.
func (s *server) writeProblem(w http.ResponseWriter, p problem, e *apiError) {
	h := w.Header()
	if e.RetryAfter > 0 {
		h.Set("Retry-After", retryAfterSeconds(e.RetryAfter))
	}
	if e.Kind == kindUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="smsgw"`)
	}
	writeJSON(w, s.log, "application/problem+json", p.Status, p)
}

// problemFor builds the problem body of e (a Kind of kindInfo) for r,
// without logging or counting it.
func problemFor(r *http.Request, e *apiError) problem {
	info := kindInfo[e.Kind]
	switch info.status {
	case http.StatusConflict, http.StatusTooManyRequests, http.StatusServiceUnavailable:
		// The contract promises Retry-After on these, at least 1 s.
		e.RetryAfter = max(e.RetryAfter, time.Second)
	}
	p := problem{
		Type:      problemTypeBase + string(e.Kind),
		Title:     info.title,
		Status:    info.status,
		Detail:    e.Detail,
		Instance:  instancePath(r),
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

// maxInstanceLen bounds a problem's instance and a logged path: the
// request path is the client's, up to the server's header limit.
const maxInstanceLen = 256

// instancePath is a problem's instance: the request path as logs show it
// (logPath: a path can carry a number, DELETE
// /v1/admin/suppressions/{number}; at most maxInstanceLen bytes).
func instancePath(r *http.Request) string { return logPath(r) }

// cutPath returns p cut to at most n bytes on a character boundary, marked
// with "..." when cut.
func cutPath(p string, n int) string {
	if len(p) <= n {
		return p
	}
	const mark = "..."
	n -= len(mark)
	for n > 0 && !utf8.RuneStart(p[n]) {
		n--
	}
	return p[:n] + mark
}

// problemOf classifies err, logs what the client will not see, counts the
// rejection and returns the problem body.
func (s *server) problemOf(r *http.Request, err error) (problem, *apiError) {
	e := toError(err)
	if _, ok := kindInfo[e.Kind]; !ok {
		e = &apiError{Kind: kindInternal, Err: err}
	}
	p := problemFor(r, e)
	if e.Kind == kindInternal {
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
	b, err := marshalBody(v)
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
