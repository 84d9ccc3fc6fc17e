package sms

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestValidateBody(t *testing.T) {
	t.Parallel()
	ok := []struct {
		body  string
		count int
	}{
		{"hello", 1},
		{"Your code is 123456", 1},
		{"line one\nline two", 1},
		{"windows\r\nline", 1},
		{"  padded  ", 1},
		{"ご注文ありがとうございます", 1},
		{"😀", 1},
		{"\uFFFD", 1}, // a literal replacement character is the sender's business
		{strings.Repeat("a", 153*10), 10},
		{strings.Repeat("あ", 67*10), 10},
	}
	for _, tt := range ok {
		s, err := ValidateBody(tt.body, 10)
		if err != nil || s.Count != tt.count {
			t.Errorf("ValidateBody(%.20q) = %+v, %v; want %d segments", tt.body, s, err, tt.count)
		}
	}

	bad := []string{
		"", " ", "\n\n", "\r\n", "\u3000", // empty or blank
		"a\x00b", "a\tb", "a\rb", "a\r", "\rb", "a\fb", "a\x1bb", "a\x7fb", "a\u0085b", "a\u009fb",
		"\xff", "a\xc3", "\xed\xa0\x80", "\xc0\x80", // invalid UTF-8: stray, truncated, surrogate, overlong NUL
		strings.Repeat("a", 153*10+1), strings.Repeat("あ", 67*10+1),
		strings.Repeat("a", 152) + "€" + strings.Repeat("b", 153*9), // 10 by division, 11 by packing
	}
	for _, body := range bad {
		s, err := ValidateBody(body, 10)
		if err == nil {
			t.Errorf("ValidateBody(%.20q) = %+v, want an error", body, s)
			continue
		}
		wantField(t, err, "body")
	}

	// Over the limit, the count is still reported.
	s, err := ValidateBody(strings.Repeat("a", 161), 1)
	if err == nil || s.Count != 2 || !strings.Contains(err.Error(), "2 GSM-7 segments") {
		t.Errorf("ValidateBody(161 a, 1) = %+v, %v; want 2 segments and an error", s, err)
	}
	// maxSegments <= 0 is no limit.
	if s, err := ValidateBody(strings.Repeat("a", 10000), 0); err != nil || s.Count != 66 {
		t.Errorf("ValidateBody(10000 a, 0) = %+v, %v; want 66 segments, no error", s, err)
	}
}

func FuzzValidateBody(f *testing.F) {
	for _, s := range []string{"hello", "", "a\r\nb", "a\rb", "\xff", "😀", `\ud800`, `\ud83d\ude00`, `\\ud800`, "\\", `\u00`} {
		f.Add([]byte(s), 2)
	}
	f.Fuzz(func(t *testing.T, raw []byte, max int) {
		body := string(raw)
		s, err := ValidateBody(body, max)
		if err == nil {
			if !utf8.ValidString(body) || s.Count < 1 || max > 0 && s.Count > max {
				t.Fatalf("accepted %q as %+v with max %d", body, s, max)
			}
			for i, r := range body {
				if unicode.IsControl(r) && r != '\n' && (r != '\r' || !strings.HasPrefix(body[i:], "\r\n")) {
					t.Fatalf("accepted control character %U", r)
				}
			}
			if strings.TrimSpace(body) == "" {
				t.Fatalf("accepted a blank body %q", body)
			}
		} else {
			wantField(t, err, "body")
		}

		// Treat raw as the inside of a JSON string: when encoding/json
		// decodes it, ValidUTF8JSON must be false exactly when the decoder
		// put in a U+FFFD that was not in the input.
		doc := append(append([]byte(`"`), raw...), '"')
		var got string
		if json.Unmarshal(doc, &got) != nil {
			return
		}
		if bytes.Contains(raw, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(raw), []byte(`\ufffd`)) {
			return
		}
		replaced := strings.ContainsRune(got, utf8.RuneError)
		if ValidUTF8JSON(doc) == replaced {
			t.Fatalf("ValidUTF8JSON(%q) = %v, but decoding replaced=%v", doc, !replaced, replaced)
		}
	})
}

func TestValidUTF8JSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw string
		ok  bool
	}{
		{`{"body":"hi"}`, true},
		{`{"body":"caf\u00e9 ` + "é" + `"}`, true},
		{`{"body":"\ud83d\ude00"}`, true},
		{`{"body":"\uD83D\uDE00"}`, true},
		{`{"body":"\\ud800"}`, true}, // an escaped backslash, then text
		{`{"body":"\\\\\ud83d\ude00"}`, true},
		{`{"body":"\"\u0041"}`, true},
		{`{"body":"\ud83d"}`, false},       // lone high surrogate
		{`{"body":"\ude00"}`, false},       // lone low surrogate
		{`{"body":"\ud83d\u0041"}`, false}, // high surrogate then not a low one
		{`{"body":"\ud83d\ud83d"}`, false},
		{`{"body":"\ud83dx"}`, false},
		{`{"body":"\\\ud800"}`, false}, // escaped backslash, then a real escape
		{"{\"body\":\"\xff\"}", false},
		{"{\"body\":\"\xed\xa0\x80\"}", false}, // surrogate as raw UTF-8
		{"{\"body\":\"\xe3\x81\"}", false},     // truncated
	}
	for _, tt := range tests {
		if got := ValidUTF8JSON([]byte(tt.raw)); got != tt.ok {
			t.Errorf("ValidUTF8JSON(%q) = %v, want %v", tt.raw, got, tt.ok)
		}
		// The property that matters: true means encoding/json replaces nothing.
		var v struct{ Body string }
		if err := json.Unmarshal([]byte(tt.raw), &v); err == nil && tt.ok == strings.ContainsRune(v.Body, utf8.RuneError) {
			t.Errorf("%q: ValidUTF8JSON=%v but json decoded %q", tt.raw, tt.ok, v.Body)
		}
	}
}
