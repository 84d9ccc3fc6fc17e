package httpapi

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

	"smsgw/internal/admission"
	"smsgw/internal/dispatch"
	"smsgw/internal/limiter"
	"smsgw/internal/opsview"
	"smsgw/internal/provider"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// ProblemKind is the closed set of ways a request can fail. Each maps to one HTTP
// status and one problem type; it doubles as the rejection metric label.
type ProblemKind string

// The kinds, each with its HTTP status.
const (
	KindInvalid            ProblemKind = "invalid"                  // 400: a field or the JSON is wrong
	kindUnauthorized       ProblemKind = "unauthorized"             // 401: no or unknown bearer key
	kindForbidden          ProblemKind = "forbidden"                // 403: the key may not do this (class, admin)
	KindNotFound           ProblemKind = "not-found"                // 404
	kindMethodNotAllowed   ProblemKind = "method-not-allowed"       // 405
	kindInFlight           ProblemKind = "idempotency-in-flight"    // 409: same Idempotency-Key still being processed
	kindTooLarge           ProblemKind = "too-large"                // 413
	kindUnsupportedMedia   ProblemKind = "unsupported-media-type"   // 415
	kindKeyReused          ProblemKind = "idempotency-key-reused"   // 422: same Idempotency-Key, different request
	KindRateLimited        ProblemKind = "rate-limited"             // 429: ingress GCRA
	kindTooManyQueued      ProblemKind = "too-many-outstanding"     // 429: max_outstanding
	kindTooManyKeyed       ProblemKind = "too-many-keyed-requests"  // 429: max_keyed_per_day
	kindBudgetExhausted    ProblemKind = "budget-exhausted"         // 429: producers[].budget, daily or monthly
	kindExpiresBeforeSend  ProblemKind = "would-expire-before-send" // 429: TTL shorter than the backlog ahead
	kindRejected           ProblemKind = "rejected-by-provider"     // 422: the provider refused the message for good
	KindCallbackNotAllowed ProblemKind = "callback-url-not-allowed" // 422: callback_url under none of the producer's webhook.allow prefixes
	kindUnavailable        ProblemKind = "unavailable"              // 503: OTP could not be sent in time, shutting down, store down
	kindInternal           ProblemKind = "internal"                 // 500: anything we did not expect
	kindAuthThrottled      ProblemKind = "too-many-auth-failures"   // 429: this client address failed to authenticate too often
	KindBadSignature       ProblemKind = "bad-signature"            // 401: a provider webhook's (receipt, inbound message) signature is missing or wrong
	kindNotCancelable      ProblemKind = "not-cancelable"           // 409: the message is sending or done
	// KindDestinationNotAllowed and the next four are protection's
	// (protection.go): refused before any quota, queue or provider.
	KindDestinationNotAllowed ProblemKind = "destination-not-allowed" // 422: region not in protection.countries
	KindNumberTypeBlocked     ProblemKind = "number-type-blocked"     // 422: type in protection.block_number_types
	KindSuppressed            ProblemKind = "suppressed"              // 422: the number is on the suppression list
	KindOTPNumberLimited      ProblemKind = "otp-number-limited"      // 429: protection.otp_per_number
	KindRangeHeld             ProblemKind = "range-held"              // 429: protection.prefix_alarm.hold
	KindSuppressionsFull      ProblemKind = "suppression-list-full"   // 409: protection.max_suppressions reached
)

// AllKinds lists every Kind, for creating metric label sets at zero.
var AllKinds = []ProblemKind{KindInvalid, kindUnauthorized, kindForbidden, KindNotFound, kindMethodNotAllowed,
	kindInFlight, kindTooLarge, kindUnsupportedMedia, kindKeyReused, KindRateLimited, kindTooManyQueued, kindTooManyKeyed,
	kindExpiresBeforeSend, kindRejected, KindCallbackNotAllowed, kindUnavailable, kindInternal, KindBadSignature, kindNotCancelable,
	KindDestinationNotAllowed, KindNumberTypeBlocked, KindSuppressed, KindOTPNumberLimited, KindRangeHeld, KindSuppressionsFull, kindAuthThrottled, kindBudgetExhausted}

// KindLabels is every problem kind, the label set of
// smsgw_api_rejections_total.
func KindLabels() []string {
	out := make([]string, len(AllKinds))
	for i, k := range AllKinds {
		out[i] = string(k)
	}
	return out
}

var kindInfo = map[ProblemKind]struct {
	status int
	title  string
}{
	KindInvalid:            {http.StatusBadRequest, "Invalid request"},
	kindUnauthorized:       {http.StatusUnauthorized, "Missing or unknown API key"},
	kindForbidden:          {http.StatusForbidden, "Not allowed for this API key"},
	KindNotFound:           {http.StatusNotFound, "Not found"},
	kindMethodNotAllowed:   {http.StatusMethodNotAllowed, "Method not allowed"},
	kindInFlight:           {http.StatusConflict, "A request with this Idempotency-Key is still being processed"},
	kindTooLarge:           {http.StatusRequestEntityTooLarge, "Request body too large"},
	kindUnsupportedMedia:   {http.StatusUnsupportedMediaType, "Unsupported content type"},
	kindKeyReused:          {http.StatusUnprocessableEntity, "Idempotency-Key reused with a different request"},
	KindRateLimited:        {http.StatusTooManyRequests, "Ingress rate limit exceeded"},
	kindTooManyQueued:      {http.StatusTooManyRequests, "Too many messages outstanding"},
	kindTooManyKeyed:       {http.StatusTooManyRequests, "Too many requests with an Idempotency-Key today"},
	kindBudgetExhausted:    {http.StatusTooManyRequests, "The producer's budget for the period is spent"},
	kindExpiresBeforeSend:  {http.StatusTooManyRequests, "Message would expire before its turn"},
	kindRejected:           {http.StatusUnprocessableEntity, "The provider rejected the message"},
	KindCallbackNotAllowed: {http.StatusUnprocessableEntity, "callback_url is not allowed for this producer"},
	kindUnavailable:        {http.StatusServiceUnavailable, "Service unavailable"},
	kindInternal:           {http.StatusInternalServerError, "Internal server error"},
	kindAuthThrottled:      {http.StatusTooManyRequests, "Too many failed authentications"},
	KindBadSignature:       {http.StatusUnauthorized, "Provider webhook signature missing or wrong"},
	kindNotCancelable:      {http.StatusConflict, "The message is sending or done and can no longer be canceled"},

	KindDestinationNotAllowed: {http.StatusUnprocessableEntity, "Destination region not allowed"},
	KindNumberTypeBlocked:     {http.StatusUnprocessableEntity, "Number type blocked"},
	KindSuppressed:            {http.StatusUnprocessableEntity, "Number is suppressed"},
	KindOTPNumberLimited:      {http.StatusTooManyRequests, "Too many OTPs to this number"},
	KindRangeHeld:             {http.StatusTooManyRequests, "Number range held"},
	KindSuppressionsFull:      {http.StatusConflict, "The suppression list is full"},
}

// ProblemTypeBase prefixes every problem type URI.
const ProblemTypeBase = "urn:smsgw:problem:"

// fieldProblem names one invalid field of a request.
type fieldProblem struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// apiError is a failure the API reports to the client as it is. Handlers return
// it (or *sms.ValidationError, or queue sentinels); writeError is the one
// place any error becomes an HTTP answer.
type apiError struct {
	Kind       ProblemKind
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

func errorf(kind ProblemKind, detail string) *apiError { return &apiError{Kind: kind, Detail: detail} }

func fieldError(field, reason string) *apiError {
	return &apiError{Kind: KindInvalid, Detail: field + ": " + reason, Fields: []fieldProblem{{field, reason}}}
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
var rejectionKinds = map[admission.RejectKind]ProblemKind{
	admission.RejectDestination:  KindDestinationNotAllowed,
	admission.RejectNumberType:   KindNumberTypeBlocked,
	admission.RejectSuppressed:   KindSuppressed,
	admission.RejectOTPPerNumber: KindOTPNumberLimited,
	admission.RejectRangeHeld:    KindRangeHeld,
	admission.RejectExpires:      kindExpiresBeforeSend,
	admission.RejectUnavailable:  kindUnavailable,
	admission.RejectInvalid:      KindInvalid,
	admission.RejectOutstanding:  kindTooManyQueued,
	admission.RejectRateLimited:  KindRateLimited,
	admission.RejectTooManyKeyed: kindTooManyKeyed,
	admission.RejectBudget:       kindBudgetExhausted,
}

// fromRejection is the one place an admission refusal becomes an answer.
func fromRejection(r *admission.Rejection) *apiError {
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
	var rj *admission.Rejection
	var sf *admission.StoreFailed
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
		return &apiError{Kind: KindInvalid, Detail: ve.Error(), Fields: []fieldProblem{{ve.Field, ve.Reason}}}
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
		return &apiError{Kind: KindInvalid, Err: err, Detail: "body: too many segments to send at once",
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
		return &apiError{Kind: KindNotFound, Detail: "no such message", Err: err}
	case admission.MaybeStored(err) && errors.As(err, &sf): // one message: its id is named
		return &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err, Extra: map[string]any{"id": sf.ID}, Detail: maybeQueuedDetail}
	case admission.MaybeStored(err): // a batch: the items' ids are not known to the client
		return &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err, Detail: maybeQueuedDetail}
	case errors.Is(err, queue.ErrClosed):
		return &apiError{Kind: kindUnavailable, Detail: "the gateway is shutting down", RetryAfter: time.Second, Err: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{Kind: kindUnavailable, Detail: "the gateway did not answer in time", RetryAfter: time.Second, Err: err}
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return &apiError{Kind: kindUnavailable, Detail: "the message store's disk is full; nothing was queued; retry later",
			RetryAfter: outageRetryAfter, Err: err}
	case DependencyDown(err):
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

// WriteError answers err as application/problem+json. Internal errors are
// logged in full and shown to the client without detail.
func (s *Server) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	p, e := s.problemOf(r, err)
	s.writeProblem(w, p, e)
}

// writeProblem writes a problem body built by problemOf or problemFor,
// with the headers its kind promises.
func (s *Server) writeProblem(w http.ResponseWriter, p problem, e *apiError) {
	h := w.Header()
	if e.RetryAfter > 0 {
		h.Set("Retry-After", retryAfterSeconds(e.RetryAfter))
	}
	if e.Kind == kindUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="smsgw"`)
	}
	writeJSON(w, s.Log, "application/problem+json", p.Status, p)
}

// problemFor builds the problem body of e (a Kind of kindInfo) for r,
// without logging or counting it.
func problemFor(r *http.Request, e *apiError) problem {
	info := kindInfo[e.Kind]
	switch {
	case info.status == http.StatusTooManyRequests, info.status == http.StatusServiceUnavailable, e.Kind == kindInFlight:
		// The contract promises Retry-After on these, at least 1 s.
		e.RetryAfter = max(e.RetryAfter, time.Second)
	case info.status == http.StatusConflict:
		// The other conflicts (not-cancelable, suppression-list-full) last
		// until something else changes: a Retry-After would have a
		// client that honours it retry for ever.
		e.RetryAfter = 0
	}
	p := problem{
		Type:      ProblemTypeBase + string(e.Kind),
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

// MaxInstanceLen bounds a problem's instance and a logged path: the
// request path is the client's, up to the server's header limit.
const MaxInstanceLen = 256

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
func (s *Server) problemOf(r *http.Request, err error) (problem, *apiError) {
	e := toError(err)
	if _, ok := kindInfo[e.Kind]; !ok {
		e = &apiError{Kind: kindInternal, Err: err}
	}
	var noSlot dispatch.NoSlotError
	if errors.As(err, &noSlot) && noSlot.Paused() && s.Ops != nil {
		// The dispatcher asks again every fraction of a second during an
		// operator's pause; a client is told the rest of a timed pause.
		e.RetryAfter = max(e.RetryAfter, s.Ops.Left())
	}
	p := problemFor(r, e)
	if e.Kind == kindInternal {
		p.Detail = ""
		p.Errors = nil
		p.Extra = nil
		s.Log.ErrorContext(r.Context(), "request failed", "method", opsview.MethodLabel(r.Method), "path", logPath(r),
			"request_id", p.RequestID, "err", err)
	} else if e.Err != nil {
		s.Log.WarnContext(r.Context(), "request refused", "kind", e.Kind, "method", opsview.MethodLabel(r.Method), "path", logPath(r),
			"request_id", p.RequestID, "err", e.Err)
	}
	s.Metrics.Rejected.WithLabelValues(string(e.Kind)).Inc()
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
	setHeaders(w.Header(), &rawHeaders, contentType, strconv.Itoa(len(b)), "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

var rawHeaders = [3]string{"Content-Type", "Content-Length", "Cache-Control"}

// setHeaders sets three headers as Header.Set would, with one allocation
// for their values instead of one each: every answer sets them. The names
// must be canonical (http.CanonicalHeaderKey).
func setHeaders(h http.Header, names *[3]string, a, b, c string) {
	v := &[3]string{a, b, c}
	h[names[0]], h[names[1]], h[names[2]] = v[0:1:1], v[1:2:2], v[2:3:3]
}
