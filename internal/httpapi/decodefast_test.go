package httpapi

import (
	"reflect"
	"strings"
	"testing"

	"smsgw/internal/httpapi/fastdecode"
)

// decodeCorpus are request bodies around decodeCommon's edges: valid
// requests, names it leaves to decodeChecked (escaped, other case, twice,
// unknown), values it must skip (strings with brackets and escapes,
// nested arrays and objects), and broken or trailing input.
var decodeCorpus = []string{
	`{"to":"+819012345678","body":"hello","class":"marketing"}`,
	` { "to" : "+819012345678" , "body" : "hello" , "class" : "marketing" } `,
	"\t{\n\"to\":\"+819012345678\",\r\n\"body\":\"x\"}\n",
	`{"to":"+819012345678","body":"hello","class":"transactional","ttl_seconds":60,"reference":"r","from":"Shop","send_at":"2030-01-01T00:00:00Z","callback_url":"https://x/y"}`,
	`{}`, `{ }`, `null`, `[]`, `""`, `1`, ``, ` `, `{`, `}`, `{"to"}`, `{"to":}`, `{"to":"a",}`, `{,}`,
	`{"to":"a"}{"to":"b"}`, `{"to":"a"} x`, `{"to":"a"}]`, `{"to":"a"}}`, `{"to":"a"} `,
	`{"to":"a","to":"b"}`, `{"to":"a","TO":"b"}`, `{"To":"a"}`, `{"\u0074o":"a"}`, `{"t\"o":"a"}`,
	`{"to":"a","zz":1}`, `{"zz":1}`, `{"to":"a","zz":{"x":[1,2,{"y":"}"}]}}`,
	`{"body":"a\"b}c]{[","to":"x"}`, `{"body":"\\","to":"x"}`, `{"body":"\\\"","to":"x"}`,
	`{"to":1}`, `{"to":null}`, `{"to":true}`, `{"to":[]}`, `{"to":{}}`, `{"ttl_seconds":"5"}`,
	`{"ttl_seconds":1e3}`, `{"ttl_seconds":1.5}`, `{"ttl_seconds":-0}`, `{"ttl_seconds":01}`,
	`{"ttl_seconds":99999999999999999999}`, `{"ttl_seconds":null}`, `{"ttl_seconds":tru}`,
	`{"to":"a"`, `{"to":"a",`, `{"to":"a`, `{"to":"a\`, `{"to"  :  "a"  }`,
	`{"messages":[{"to":"a","to":"b"},{"x":1}]}`, `{"messages":[]}`, `{"messages":null}`, `{"messages":{}}`,
	`{"messages":[1,"a",[{}],{"a":[{"b":"]"}]}]}`, `{"messages":[],"messages":[]}`,
	`{"deadline_ms":500,"to":"+819012345678","body":"123456"}`, `{"duration_seconds":1.5,"reason":"r"}`,
	`{"reason":"x","to":"+819012345678"}`, `{"to":"\ud800"}`, `{"to":"\u00e9"}`, `{"body":"é✓"}`,
	`{"to":"a"` + strings.Repeat(" ", 10) + `}`, `{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
}

// decodeTargets are the request types decodeStrict reads.
func decodeTargets() []func() any {
	return []func() any{
		func() any { return &messageRequest{} },
		func() any { return &otpRequest{} },
		func() any { return &pauseRequest{} },
		func() any { return &suppressionRequest{} },
	}
}

// checkDecodeAgrees: decodeStrict (decodeCommon first) and the reference
// decodeChecked give the same error, or both none and the same value.
func checkDecodeAgrees(t *testing.T, raw []byte) {
	t.Helper()
	for _, mk := range decodeTargets() {
		for _, prefix := range []string{"", "messages[3]."} {
			got, want := mk(), mk()
			gerr := decodeStrict(raw, got, prefix)
			werr := decodeStrictReference(raw, want, prefix)
			if !reflect.DeepEqual(gerr, werr) {
				t.Fatalf("%T %q prefix %q: error %v, want %v", got, raw, prefix, gerr, werr)
			}
			if werr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("%T %q: decoded %+v, want %+v", got, raw, got, want)
			}
		}
	}
}

// decodeStrictReference is decodeStrict without decodeCommon.
func decodeStrictReference(raw []byte, dst any, prefix string) error {
	if err := checkUTF8(raw, prefix); err != nil {
		return err
	}
	return decodeChecked(raw, dst, prefix)
}

func TestDecodeCommonAgrees(t *testing.T) {
	for _, c := range decodeCorpus {
		checkDecodeAgrees(t, []byte(c))
	}
	// decodeCommon does take the common request (else the agreement
	// above would be trivial).
	var req messageRequest
	if !fastdecode.DecodeCommon([]byte(decodeCorpus[3]), &req) || req.CallbackURL != "https://x/y" || *req.TTLSeconds != 60 {
		t.Fatalf("decodeCommon left the common request: %+v", req)
	}
	for _, c := range []string{`{"to":"a","to":"b"}`, `{"TO":"a"}`, `{"zz":1}`, `{"to":1}`, `{"to":"a"} x`, `null`} {
		if fastdecode.DecodeCommon([]byte(c), &messageRequest{}) {
			t.Errorf("decodeCommon took %s", c)
		}
	}
}

func FuzzDecodeCommon(f *testing.F) {
	for _, c := range decodeCorpus {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkDecodeAgrees(t, raw)
	})
}
