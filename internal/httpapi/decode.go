package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/httpapi/fastdecode"
	"smsgw/internal/sms"
)

// MaxReferenceLen bounds the producer's own reference.
const MaxReferenceLen = 128

// messageRequest is the body of POST /v1/messages and one item of a batch.
type messageRequest struct {
	To         string `json:"to"`
	Body       string `json:"body"`
	Class      string `json:"class"`
	From       string `json:"from,omitempty"`
	Reference  string `json:"reference,omitempty"`
	TTLSeconds *int64 `json:"ttl_seconds,omitempty"`
	SendAt     string `json:"send_at,omitempty"`
	// CallbackURL receives this message's status events (under one of the
	// producer's webhook.allow prefixes).
	CallbackURL string `json:"callback_url,omitempty"`
}

type otpRequest struct {
	To          string `json:"to"`
	Body        string `json:"body"`
	From        string `json:"from,omitempty"`
	Reference   string `json:"reference,omitempty"`
	DeadlineMS  *int64 `json:"deadline_ms,omitempty"`
	CallbackURL string `json:"callback_url,omitempty"`
}

type pauseRequest struct {
	DurationSeconds *float64 `json:"duration_seconds,omitempty"`
	Reason          string   `json:"reason,omitempty"`
	// Class or Producer pauses that part only (resumeRequest: resumes it).
	Class    *string `json:"class,omitempty"`
	Producer *string `json:"producer,omitempty"`
}

// resumeRequest is the optional body of POST /v1/admin/resume.
type resumeRequest struct {
	Class    *string `json:"class,omitempty"`
	Producer *string `json:"producer,omitempty"`
}

// readBody checks the content type and reads the whole (size-limited) body.
// An empty body is allowed only when allowEmpty.
func readBody(r *http.Request, allowEmpty bool) ([]byte, error) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		return nil, &apiError{Kind: KindInvalid, Detail: "could not read the request body", Fields: []fieldProblem{{"request", "unreadable body"}}, Err: err}
	}
	if len(raw) == 0 && allowEmpty {
		return nil, nil
	}
	if err := checkJSONContentType(r.Header.Get("Content-Type")); err != nil {
		return nil, err
	}
	return raw, nil
}

func checkJSONContentType(ct string) error {
	if ct == "" {
		return errorf(kindUnsupportedMedia, "send Content-Type: application/json")
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return errorf(kindUnsupportedMedia, "unparseable Content-Type; send application/json")
	}
	if mt != "application/json" && (!strings.HasPrefix(mt, "application/") || !strings.HasSuffix(mt, "+json")) {
		return errorf(kindUnsupportedMedia, "Content-Type "+mt+" is not supported; send application/json")
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return errorf(kindUnsupportedMedia, "charset "+cs+" is not supported; JSON is UTF-8")
	}
	return nil
}

// decodeStrict decodes one JSON object into dst: valid UTF-8 checked on the
// raw bytes first (encoding/json would silently replace invalid bytes and
// lone surrogates with U+FFFD), unknown fields refused, nothing after the
// object. Field names in errors carry prefix ("messages[3].").
func decodeStrict(raw []byte, dst any, prefix string) error {
	if err := checkUTF8(raw, prefix); err != nil {
		return err
	}
	if fastdecode.DecodeCommon(raw, dst) {
		return nil
	}
	return decodeChecked(raw, dst, prefix)
}

func checkUTF8(raw []byte, prefix string) error {
	if !sms.ValidUTF8JSON(raw) {
		return fieldError(prefix+invalidUTF8Field(raw), "is not valid UTF-8 (or holds an unpaired surrogate escape)")
	}
	return nil
}

// decodeChecked is decodeStrict after the UTF-8 check, every step on its
// own: the member names, the decode, what follows the object. It is the
// reference decodeCommon must agree with, and the path of every request
// decodeCommon leaves (an unusual name, any error).
func decodeChecked(raw []byte, dst any, prefix string) error {
	if err := checkMemberNames(raw, dst, prefix); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err, prefix)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fieldError(strings.TrimSuffix(prefix, ".")+orWhole(prefix), "must be a single JSON object with nothing after it")
	}
	return nil
}

// checkMemberNames refuses a top-level member named twice, or named in
// another case than dst's fields: encoding/json would keep the last of two
// and match names case-insensitively, so a validator in front of us that
// reads the first "to" (or only "to", not "TO") would see another number
// than the one we send to. Nested objects are checked where they are
// decoded (a batch's items, one by one). Anything that is not an object is
// left to the decoder's own errors.
func checkMemberNames(raw []byte, dst any, prefix string) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	known := jsonNames(dst)
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		name, _ := tok.(string)
		field := prefix + name
		if !fastdecode.PlainToken(name, 64) {
			field = strings.TrimSuffix(prefix, ".") + orWhole(prefix)
		}
		switch {
		case seen[name]:
			return fieldError(field, "appears more than once")
		case !known[name]:
			for k := range known {
				if strings.EqualFold(k, name) {
					return fieldError(field, "is not a known field (names are case-sensitive: "+strconv.Quote(k)+")")
				}
			}
		}
		seen[name] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// jsonNames are the JSON member names of the struct dst points to, read
// once per type (the request types are a fixed set, so the cache is
// bounded by the code, not by requests). Callers must not modify them.
func jsonNames(dst any) map[string]bool {
	t := reflect.TypeOf(dst)
	if names, ok := jsonNameCache.Load(t); ok {
		return names.(map[string]bool)
	}
	names := readJSONNames(t)
	jsonNameCache.Store(t, names)
	return names
}

var jsonNameCache sync.Map // reflect.Type -> map[string]bool

func readJSONNames(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return out
	}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		if name != "-" {
			out[name] = true
		}
	}
	return out
}

func orWhole(prefix string) string {
	if prefix == "" {
		return "request"
	}
	return ""
}

// invalidUTF8Field finds the top-level member whose value is not valid
// UTF-8, to name it in the error; "request" when it cannot tell.
func invalidUTF8Field(raw []byte) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return "request"
	}
	for k, v := range m {
		if !sms.ValidUTF8JSON(v) && utf8.ValidString(k) && fastdecode.PlainToken(k, 32) {
			return k
		}
	}
	return "request"
}

// jsonError names the field a decoding error is about.
func jsonError(err error, prefix string) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	whole := strings.TrimSuffix(prefix, ".") + orWhole(prefix)
	switch {
	case errors.As(err, &te):
		if te.Field == "" {
			return fieldError(whole, "must be a JSON object")
		}
		return fieldError(prefix+te.Field, "must be "+jsonTypeName(te.Type.Kind().String()))
	case errors.As(err, &se):
		return fieldError(whole, fmt.Sprintf("is not valid JSON (at byte %d)", se.Offset))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fieldError(whole, "is empty or truncated JSON")
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if f, uerr := strconv.Unquote(name); uerr == nil && fastdecode.PlainToken(f, 64) {
			return fieldError(prefix+f, "is not a known field")
		}
		return fieldError(whole, "holds an unknown field")
	}
	return fieldError(whole, "is not valid JSON")
}

func jsonTypeName(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "int", "int64", "float64", "uint8":
		return "a number"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	case "ptr":
		return "a number"
	}
	return "of another type"
}

// validated is a message request that passed every check.
type validated struct {
	msg      *sms.Message
	segments sms.Segments
	ttl      time.Duration // 0: never expires
}

// validateMessage checks a request field by field and reports every
// problem at once. The class is checked for shape here; whether the
// producer may use it is the caller's (403, not 400).
func (s *Server) validateMessage(req *messageRequest, class sms.Class, prefix string) (validated, []fieldProblem) {
	var errs []fieldProblem
	add := func(err error) {
		if err == nil {
			return // before errors.As: its target would cost an allocation per field
		}
		var ve *sms.ValidationError
		if errors.As(err, &ve) {
			errs = append(errs, fieldProblem{prefix + ve.Field, ve.Reason})
		} else if err != nil {
			errs = append(errs, fieldProblem{prefix + "request", err.Error()})
		}
	}
	to, err := sms.ParseE164(req.To)
	if req.To == "" {
		err = &sms.ValidationError{Field: "to", Reason: "is required"}
	}
	add(err)
	add(sms.ValidateSender(req.From))
	seg, err := sms.ValidateBody(req.Body, s.Cfg.Messages.MaxSegments)
	if err == nil {
		err = s.checkSegmentCost(class, seg)
	}
	add(err)
	add(sms.ValidateReference(req.Reference, MaxReferenceLen))
	if req.CallbackURL != "" {
		if err := config.CheckCallbackURL(req.CallbackURL); err != nil {
			errs = append(errs, fieldProblem{prefix + "callback_url", err.Error()})
		}
	}
	var sendAt time.Time
	if req.SendAt != "" {
		var err error
		if sendAt, err = time.Parse(time.RFC3339Nano, req.SendAt); err != nil {
			errs = append(errs, fieldProblem{prefix + "send_at", "must be an RFC 3339 date-time with its offset, e.g. 2025-01-15T09:00:00Z"})
		} else if sendAt.IsZero() {
			// Given, the zero instant is in the past like any other time;
			// from here on the zero time means "no send_at".
			errs = append(errs, fieldProblem{prefix + "send_at", admission.SendAtPast})
		}
	}
	ttl := s.Cfg.Messages.DefaultTTL
	if req.TTLSeconds != nil {
		maxTTL := int64(s.Cfg.Messages.MaxTTL / time.Second)
		switch v := *req.TTLSeconds; {
		case v < 1:
			errs = append(errs, fieldProblem{prefix + "ttl_seconds", "must be at least 1"})
		case v > maxTTL:
			errs = append(errs, fieldProblem{prefix + "ttl_seconds", fmt.Sprintf("must be at most %d (messages.max_ttl)", maxTTL)})
		default:
			ttl = time.Duration(v) * time.Second
		}
	}
	if len(errs) > 0 {
		return validated{}, errs
	}
	cost := 1
	if s.Cfg.Provider.CountSegments {
		cost = max(1, seg.Count)
	}
	m := &sms.Message{
		Class:     class,
		To:        to,
		From:      req.From,
		Body:      req.Body,
		Reference: req.Reference,
		Segments:  cost,
		SendAt:    sendAt.UTC(),

		CallbackURL: req.CallbackURL,
	}
	m.RequestHash = admission.RequestHash(m, ttl)
	return validated{msg: m, segments: seg, ttl: ttl}, nil
}

// checkSegmentCost refuses a body the provider rate can never send: when
// segments are counted a message costs its segments, and the shared
// limiter grants at most its class's burst at once
// (config.SegmentsPerMessage; the same bound as the limiter's
// limiter.Config.MaxCost of limiterConfig). Accepting more would queue a
// message that can only fail. messages.max_segments itself is
// sms.ValidateBody's.
func (s *Server) checkSegmentCost(class sms.Class, seg sms.Segments) error {
	most, key := s.Cfg.SegmentsPerMessage(class.String())
	if seg.Count <= most {
		return nil
	}
	return &sms.ValidationError{Field: "body", Reason: fmt.Sprintf(
		"needs %d %s segments; at most %d per message (%s: the most segments the provider rate sends at once)",
		seg.Count, seg.Encoding, most, key)}
}

// parseClass checks the class field's shape.
func parseClass(name, prefix string) (sms.Class, *fieldProblem) {
	if name == "" {
		return 0, &fieldProblem{prefix + "class", "is required (otp, transactional or marketing)"}
	}
	c, err := sms.ParseClass(name)
	if err != nil {
		return 0, &fieldProblem{prefix + "class", "must be one of otp, transactional, marketing"}
	}
	return c, nil
}
