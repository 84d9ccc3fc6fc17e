package gateway

import (
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"smsgw/internal/httpapi"
	"smsgw/internal/sms"
)

// The contract fixes a client generated from api/openapi.yaml needed.

// Problem.type is an enum of exactly the kinds the gateway answers.
func TestProblemTypesMatchSpec(t *testing.T) {
	doc, err := specDoc()
	if err != nil {
		t.Fatal(err)
	}
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
	doc, err := specDoc()
	if err != nil {
		t.Fatal(err)
	}
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

func specPattern(t *testing.T, schema string) *regexp.Regexp {
	t.Helper()
	doc, err := specDoc()
	if err != nil {
		t.Fatal(err)
	}
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
