package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"

	"smsgw/api"
	"smsgw/internal/httpapi"
	"smsgw/internal/sms"
)

// The contract fixes a client generated from api/openapi.yaml needed.

// Problem.type is an enum of exactly the kinds the gateway answers.
func TestProblemTypesMatchSpec(t *testing.T) {
	doc := loadedSpec(t)
	var inSpec []string
	for _, v := range doc.Components.Schemas["Problem"].Value.Properties["type"].Value.Enum {
		inSpec = append(inSpec, v.(string))
	}
	var kinds []string
	for _, k := range httpapi.AllKinds {
		kinds = append(kinds, httpapi.ProblemTypeBase+string(k))
	}
	slices.Sort(inSpec)
	slices.Sort(kinds)
	if !slices.Equal(inSpec, kinds) {
		t.Errorf("Problem.type enum %v\nKinds %v", inSpec, kinds)
	}
}

// Every number of the spec says its format: a generated client otherwise
// picks float32.
func TestSpecNumbersAreDouble(t *testing.T) {
	doc := loadedSpec(t)
	seen := map[*openapi3.Schema]bool{}
	var walk func(path string, s *openapi3.SchemaRef)
	walk = func(path string, s *openapi3.SchemaRef) {
		if s == nil || s.Value == nil || seen[s.Value] {
			return
		}
		v := s.Value
		seen[v] = true
		if v.Type.Is("number") && v.Format != "double" {
			t.Errorf("%s: type number with format %q, want double", path, v.Format)
		}
		for name, p := range v.Properties {
			walk(path+"."+name, p)
		}
		walk(path+"[]", v.Items)
		if v.AdditionalProperties.Schema != nil {
			walk(path+"{}", v.AdditionalProperties.Schema)
		}
		for _, s := range slices.Concat(v.AllOf, v.AnyOf, v.OneOf) {
			walk(path, s)
		}
	}
	for name, s := range doc.Components.Schemas {
		walk(name, s)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status, r := range op.Responses.Map() {
				for ct, mt := range r.Value.Content {
					walk(method+" "+path+" "+status+" "+ct, mt.Schema)
				}
			}
		}
	}
}

// loadedSpec is specDoc, or the test fails.
func loadedSpec(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := specDoc()
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func specPattern(t *testing.T, schema string) *regexp.Regexp {
	t.Helper()
	doc := loadedSpec(t)
	return regexp.MustCompile(doc.Components.Schemas[schema].Value.Pattern)
}

// The patterns of to, from and body refuse what the gateway refuses (what
// a pattern can say: not whether a number exists) and pass what it
// accepts, so a validator in front of the gateway agrees with it.
func TestSpecPatternsMatchValidation(t *testing.T) {
	from, body, to, ref := specPattern(t, "Sender"), specPattern(t, "Body"), specPattern(t, "Recipient"), specPattern(t, "Reference")
	// Every sender id over a small alphabet up to 7 characters, and random
	// longer ones across the 11-character limit.
	alphabet := []string{"a", "Z", "7", " ", "-"}
	checkFrom := func(s string) {
		if ok := sms.ValidateSender(s) == nil; from.MatchString(s) != ok {
			t.Errorf("from %q: pattern %v, validation %v", s, !ok, ok)
		}
	}
	var gen func(prefix string)
	gen = func(prefix string) {
		checkFrom(prefix)
		if len(prefix) < 7 {
			for _, c := range alphabet {
				gen(prefix + c)
			}
		}
	}
	gen("")
	r := rand.New(rand.NewPCG(1, 2))
	for range 50000 {
		var b strings.Builder
		for range 8 + r.IntN(7) {
			b.WriteString(alphabet[r.IntN(3+r.IntN(3))]) // mostly letters and digits
		}
		checkFrom(b.String())
	}
	for _, s := range []string{"", "+819012345678", "+81901234567890123", "+8190"} {
		if sms.ValidateSender(s) == nil && !from.MatchString(s) {
			t.Errorf("from %q accepted by the gateway, refused by the pattern", s)
		}
	}
	if !to.MatchString("+819012345678") || to.MatchString("819012345678") || to.MatchString("+81 90") {
		t.Error("to pattern")
	}
	// Bodies from pieces of every kind the rule treats apart.
	pieces := []string{"a", " ", "\n", "\r\n", "\r", "\t", "\x00", "\x7f", "\u0085", "\u00a0", "\u3000", "é", "😀", "\u2028"}
	for range 20000 {
		var b strings.Builder
		for range r.IntN(6) + 1 {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		s := b.String()
		_, err := sms.ValidateBody(s, 0)
		if ok := err == nil; body.MatchString(s) != ok {
			t.Fatalf("body %q: pattern %v, validation %v (%v)", s, !ok, ok, err)
		}
		if ok := len(s) <= httpapi.MaxReferenceLen && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r >= 0x7f && r <= 0x9f }); ref.MatchString(s) != ok {
			t.Fatalf("reference %q: pattern %v, validation %v", s, !ok, ok)
		}
	}
}

// A method a path does not have is a 405 problem with Allow, as
// documented (checkSpec validates it against the path's 405).
func TestMethodNotAllowedSaysWhatIs(t *testing.T) {
	h := start(t, embeddedMode, nil)
	for _, tc := range []struct{ method, path, key, allow string }{
		{http.MethodPut, "/v1/messages", keyNotify, "POST"},
		{http.MethodPatch, "/v1/messages/" + sms.NewID(time.Now()), keyNotify, "GET"},
		{http.MethodDelete, "/healthz", "", "GET"},
		{http.MethodGet, "/v1/admin/pause", keyAdmin, "POST"},
	} {
		r := h.do(req{method: tc.method, path: tc.path, key: tc.key})
		wantStatus(t, r, http.StatusMethodNotAllowed)
		// Other methods may join a path; the ones named must be there.
		if got := strings.Split(r.header.Get("Allow"), ", "); !slices.Contains(got, tc.allow) || slices.Contains(got, tc.method) {
			t.Errorf("%s %s: Allow %q, want it to list %s", tc.method, tc.path, got, tc.allow)
		}
		if p := r.problem(t); p["type"] != httpapi.ProblemTypeBase+"method-not-allowed" {
			t.Errorf("%s %s: problem %v", tc.method, tc.path, p)
		}
	}
}

// oapiCodegen is the generator the client build is checked with: a
// client generated from the spec by it must compile.
const oapiCodegen = "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@v2.8.2"

// clientModule is the module the generated client is built in, its
// dependencies pinned (the runtime v2.8.2's clients import).
const clientModule = `module smsgwclient

go 1.27.3

require (
	github.com/oapi-codegen/runtime v1.9.0
	go.yaml.in/yaml/v3 v3.0.6
)

require (
	github.com/apapsch/go-jsonmerge/v2 v2.0.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
)
`

// A Go client generated from api/openapi.yaml compiles. The generator and
// the client's runtime are Go modules fetched like the gateway's own: when
// they cannot be fetched the test fails, it does not skip.
func TestGeneratedClientBuilds(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to generate and build the client: %v", err)
	}
	dir := t.TempDir()
	spec := filepath.Join(dir, "openapi.yaml")
	if err := os.WriteFile(spec, api.OpenAPI, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(clientModule), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []byte {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), goCmd, args...)
		cmd.Dir = dir
		// The toolchain running this test builds the client; modules may be
		// fetched (and go.sum written) in the client's own module.
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod", "GOWORK=off")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return out
	}
	code := run("run", oapiCodegen, "-generate", "types,client", "-package", "smsgwclient", spec)
	if err := os.WriteFile(filepath.Join(dir, "client.go"), code, 0o600); err != nil {
		t.Fatal(err)
	}
	run("build", "./...")
	// The client has every operation of the spec, the alias included.
	doc := loadedSpec(t)
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			name := strings.ToUpper(op.OperationID[:1]) + op.OperationID[1:]
			if !strings.Contains(string(code), "func (c *Client) "+name+"(") {
				t.Errorf("the generated client has no %s", name)
			}
		}
	}
	if !strings.Contains(string(code), "type StatusEvent struct") {
		t.Error("the generated client has no StatusEvent, the callbacks' body")
	}
}

// POST /send and POST /v1/messages answer the same request alike: the
// same status, the same headers and the same body but for the message's
// own id and times; an Idempotency-Key used on one path replays on the
// other.
func TestSendAnswersAsPostMessage(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, nil)
		for _, tc := range []struct {
			name string
			r    req
		}{
			{"queued", req{key: keyNotify, body: msg("transactional", "reference", "order-17", "from", "Shop")}},
			{"scheduled", req{key: keyNotify, body: msg("marketing", "send_at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))}},
			{"invalid", req{key: keyNotify, body: msg("transactional", "to", "09012345678", "ttl_seconds", 0)}},
			{"unknown field", req{key: keyNotify, body: msg("transactional", "priority", "high")}},
			{"no key", req{body: msg("transactional")}},
			{"class not allowed", req{key: keyNotify, body: msg("otp")}},
			{"form", req{key: keyNotify, body: msg("transactional"), header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}},
			{"too large", req{key: keyNotify, body: `{"to":"+819012345678","class":"transactional","body":"` + strings.Repeat("a", 1<<20) + `"}`}},
			{"over max_outstanding", req{key: keyCapped, body: msg("transactional", "send_at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				h := h.with(t)
				var got [2]reply
				for i, path := range []string{"/v1/messages", "/send"} {
					r := tc.r
					r.method, r.path = http.MethodPost, path
					if tc.name == "over max_outstanding" && i == 0 {
						// Fill the producer's max_outstanding (2) first.
						for range 2 {
							wantStatus(t, h.do(r), http.StatusAccepted)
						}
					}
					got[i] = h.do(r)
				}
				if tc.name == "over max_outstanding" {
					wantStatus(t, got[0], http.StatusTooManyRequests)
					// Decided before the ingress quota is read: the
					// RateLimit fields, which describe the quota, are not sent.
					if rl := got[0].header.Get("RateLimit-Limit"); rl != "" {
						t.Errorf("the max_outstanding 429 carries RateLimit-Limit %q", rl)
					}
				}
				sameAnswer(t, got[0], got[1])
			})
		}
		// An Idempotency-Key is one key on both paths.
		key := map[string]string{"Idempotency-Key": "alias-" + string(m)}
		first := h.do(req{method: http.MethodPost, path: "/v1/messages", key: keyNotify, body: msg("transactional"), header: key})
		wantStatus(t, first, http.StatusAccepted)
		again := h.do(req{method: http.MethodPost, path: "/send", key: keyNotify, body: msg("transactional"), header: key})
		wantStatus(t, again, http.StatusAccepted)
		if string(again.body) != string(first.body) || again.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("/send with /v1/messages' Idempotency-Key: %s (replayed %q), want the first answer %s",
				again.body, again.header.Get("Idempotent-Replayed"), first.body)
		}
		other := h.do(req{method: http.MethodPost, path: "/send", key: keyNotify, body: msg("marketing"), header: key})
		wantStatus(t, other, http.StatusUnprocessableEntity)
	})
}

// sameAnswer fails unless a and b have the same status, header names and
// body, the values that name one message (its id, its times, the request
// id) aside.
func sameAnswer(t *testing.T, a, b reply) {
	t.Helper()
	if a.status != b.status {
		t.Fatalf("status %d on /v1/messages, %d on /send; bodies %s / %s", a.status, b.status, a.body, b.body)
	}
	names := func(h http.Header) []string {
		var out []string
		for k := range h {
			if k != "Date" {
				out = append(out, k)
			}
		}
		slices.Sort(out)
		return out
	}
	if na, nb := names(a.header), names(b.header); !slices.Equal(na, nb) {
		t.Errorf("headers %v on /v1/messages, %v on /send", na, nb)
	}
	for _, k := range []string{"Content-Type", "Retry-After", "RateLimit-Limit", "WWW-Authenticate", "Idempotent-Replayed"} {
		if a.header.Get(k) != b.header.Get(k) {
			t.Errorf("%s %q on /v1/messages, %q on /send", k, a.header.Get(k), b.header.Get(k))
		}
	}
	var ja, jb map[string]any
	a.json(t, &ja)
	b.json(t, &jb)
	if loc := b.header.Get("Location"); loc != "" && loc != "/v1/messages/"+fmt.Sprint(jb["id"]) {
		t.Errorf("/send: Location %q for message %v", loc, jb["id"])
	}
	for _, j := range []map[string]any{ja, jb} {
		for _, k := range []string{"id", "estimated_send_at", "expires_at", "send_at", "request_id", "instance", "outstanding"} {
			if _, ok := j[k]; ok {
				j[k] = "(one message's)"
			}
		}
	}
	if !reflect.DeepEqual(ja, jb) {
		t.Errorf("body on /v1/messages:\n %v\non /send:\n %v", ja, jb)
	}
}

// The spec's /send is /v1/messages' operation: the same parameters,
// body, security and answers, and marked as its alias.
func TestSpecSendIsPostMessage(t *testing.T) {
	doc := loadedSpec(t)
	send, msgs := doc.Paths.Find("/send").Post, doc.Paths.Find("/v1/messages").Post
	if send.Extensions["x-smsgw-alias-of"] != msgs.OperationID {
		t.Errorf("/send is not marked as the alias of %s: %v", msgs.OperationID, send.Extensions)
	}
	same := func(what string, a, b any) {
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Errorf("%s of /send differ from /v1/messages':\n %s\n %s", what, jb, ja)
		}
	}
	same("parameters", msgs.Parameters, send.Parameters)
	same("request body", msgs.RequestBody, send.RequestBody)
	same("answers", msgs.Responses, send.Responses)
	same("security", msgs.Security, send.Security)
}

// During an operator's timed pause the OTP fast path's 503 says when the
// pause ends, not that a slot may come in a second.
func TestOTPDuringPauseSaysWhenItEnds(t *testing.T) {
	eachMode(t, func(t *testing.T, m mode) {
		h := start(t, m, nil)
		wantStatus(t, h.post("/v1/admin/pause", keyAdmin, map[string]any{"duration_seconds": 60}), http.StatusOK)
		r := h.post("/v1/otp", keyLogin, map[string]any{"to": "+819012345678", "body": "Your code is 123456"})
		wantStatus(t, r, http.StatusServiceUnavailable)
		after, err := strconv.Atoi(r.header.Get("Retry-After"))
		if err != nil || after < 50 || after > 60 {
			t.Errorf("Retry-After %q during a 60 s pause, want the rest of it", r.header.Get("Retry-After"))
		}
		if p := r.problem(t); p["retry_after_seconds"] != float64(after) {
			t.Errorf("retry_after_seconds %v, Retry-After %d", p["retry_after_seconds"], after)
		}
		wantStatus(t, h.post("/v1/admin/resume", keyAdmin, nil), http.StatusOK)
		eventually(t, "an OTP sent after the resume", func() bool {
			return h.post("/v1/otp", keyLogin, map[string]any{"to": "+819012345678", "body": "Your code is 123456"}).status == http.StatusOK
		})
	})
}

// validRequest reports whether the spec admits a request as a validating
// proxy in front of the gateway would check it.
func validRequest(t *testing.T, method, path string, body []byte) error {
	t.Helper()
	router, err := spec()
	if err != nil {
		t.Fatal(err)
	}
	hr, err := http.NewRequestWithContext(t.Context(), method, "http://gateway.example"+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+keyNotify)
	route, params, err := router.FindRoute(hr)
	if err != nil {
		t.Fatal(err)
	}
	return openapi3filter.ValidateRequest(t.Context(), &openapi3filter.RequestValidationInput{
		Request: hr, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	})
}

// A batch with bad items is valid under the spec, as the gateway takes
// it: it queues the good items and answers each bad one with its problem.
// A validator in front of the gateway therefore passes it whole; a
// malformed batch (no messages) it still refuses.
func TestBatchWithBadItemsPassesAValidator(t *testing.T) {
	h := start(t, embeddedMode, nil)
	batch, err := json.Marshal(map[string]any{"messages": []any{
		msg("transactional"),
		msg("transactional", "to", "09012345678"),
		msg("transactional", "class", 3, "priority", "high"),
		"not a message",
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := validRequest(t, http.MethodPost, "/v1/messages/batch", batch); err != nil {
		t.Errorf("a batch with bad items is invalid under the spec: %v", err)
	}
	r := h.post("/v1/messages/batch", keyNotify, batch)
	wantStatus(t, r, http.StatusOK)
	var br httpapi.BatchResponse
	r.json(t, &br)
	if br.Accepted != 1 || br.Rejected != 3 {
		t.Errorf("batch answered %d accepted, %d rejected; want 1 and 3: %s", br.Accepted, br.Rejected, r.body)
	}
	for _, bad := range []string{`{}`, `{"messages":[]}`, `{"messages":{}}`} {
		if validRequest(t, http.MethodPost, "/v1/messages/batch", []byte(bad)) == nil {
			t.Errorf("batch %s is valid under the spec", bad)
		}
	}
	// A single message is still checked whole.
	one, _ := json.Marshal(msg("transactional", "to", "09012345678"))
	for _, path := range []string{"/v1/messages", "/send"} {
		if validRequest(t, http.MethodPost, path, one) == nil {
			t.Errorf("POST %s with a bad number is valid under the spec", path)
		}
	}
}

// Every operation shows how it is called: an example of its body in each
// media type it takes and of each parameter; one that takes neither shows
// an example answer. The loader checks every example against its schema
// (specDoc validates the document).
func TestEveryOperationHasAnExample(t *testing.T) {
	doc := loadedSpec(t)
	ops := map[string]*openapi3.Operation{}
	add := func(where string, item *openapi3.PathItem) {
		for method, op := range item.Operations() {
			ops[method+" "+where] = op
			for name, cb := range op.Callbacks {
				for expr, cbItem := range cb.Value.Map() {
					for m, cbOp := range cbItem.Operations() {
						ops[m+" "+expr+" (callback "+name+")"] = cbOp
					}
				}
			}
		}
	}
	for path, item := range doc.Paths.Map() {
		add(path, item)
	}
	for name, item := range doc.Webhooks {
		add("webhook "+name, item)
	}
	if len(ops) < 25 {
		t.Fatalf("found only %d operations", len(ops))
	}
	for where, op := range ops {
		takes := false
		if op.RequestBody != nil {
			takes = true
			for ct, mt := range op.RequestBody.Value.Content {
				if mt.Example == nil && len(mt.Examples) == 0 {
					t.Errorf("%s: no example of its %s body", where, ct)
				}
			}
		}
		for _, p := range op.Parameters {
			takes = true
			if p.Value.Example == nil && len(p.Value.Examples) == 0 {
				t.Errorf("%s: no example of parameter %s", where, p.Value.Name)
			}
		}
		if takes {
			continue
		}
		shown := false
		for status, r := range op.Responses.Map() {
			for _, mt := range r.Value.Content {
				shown = shown || strings.HasPrefix(status, "2") && (mt.Example != nil || len(mt.Examples) > 0)
			}
		}
		if !shown {
			t.Errorf("%s takes no body or parameter and shows no example answer", where)
		}
	}
}
