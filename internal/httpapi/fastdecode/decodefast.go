// Package fastdecode decodes the common request shapes without
// reflection on every member; anything unusual is left to the strict
// decoder.
package fastdecode

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync"
)

// DecodeCommon decodes the common request in one read and reports whether
// it did: a JSON object whose member names are each one of dst's fields,
// written exactly (no escape, no other case) and at most once, into a
// struct of scalar fields (requestShape.flat). json.Unmarshal then reads
// it as decodeChecked's decoder would: the names are all known, so
// refusing unknown ones changes nothing, and Unmarshal's own check of the
// whole input refuses anything after the object. Anything else, and any
// error, returns false with dst zeroed, and decodeChecked answers it, so
// the two cannot disagree on what is refused or how the problem reads
// (TestDecodeCommonAgrees, FuzzDecodeCommon).
func DecodeCommon(raw []byte, dst any) bool {
	shape := requestShapeOf(dst)
	if !shape.flat || !plainMembers(raw, shape.names) {
		return false
	}
	if json.Unmarshal(raw, dst) != nil {
		reflect.ValueOf(dst).Elem().SetZero()
		return false
	}
	return true
}

// requestShape is what decodeCommon needs of a request type.
type requestShape struct {
	// names are the JSON member names, in field order (at most 64).
	names []string
	// flat: a struct of exported, named fields, each a scalar, a pointer to
	// one, or a slice of them or of json.RawMessage: no nested object is
	// decoded into a struct, so no unknown name can hide below the top.
	flat bool
}

var requestShapes sync.Map // reflect.Type -> *requestShape; the request types are a fixed set

func requestShapeOf(dst any) *requestShape {
	t := reflect.TypeOf(dst)
	if s, ok := requestShapes.Load(t); ok {
		return s.(*requestShape)
	}
	s := readRequestShape(t)
	requestShapes.Store(t, s)
	return s
}

func readRequestShape(t reflect.Type) *requestShape {
	s := &requestShape{}
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct || t.Elem().NumField() > 64 {
		return s
	}
	for f := range t.Elem().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || f.Anonymous || !PlainToken(name, 64) || !scalarOrSlice(f.Type) {
			return &requestShape{}
		}
		s.names = append(s.names, name)
	}
	s.flat = true
	return s
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

func scalarOrSlice(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawMessageType {
		return true
	}
	if t.Kind() == reflect.Slice {
		t = t.Elem()
		if t == rawMessageType {
			return true
		}
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
	}
	if t.Implements(jsonUnmarshalerType) || reflect.PointerTo(t).Implements(jsonUnmarshalerType) {
		return false
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

var jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// plainMembers reports whether raw reads as an object whose member names
// are each one of names, without escapes, at most once. It reads only
// the names and skips the values by their brackets and strings; it checks
// no syntax (json.Unmarshal does, after it), so on input that is not
// valid JSON its answer means nothing, but it always returns.
func plainMembers(raw []byte, names []string) bool {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return false
	}
	var seen uint64
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return true
	}
	for i < len(raw) {
		if raw[i] != '"' {
			return false
		}
		end := i + 1
		for end < len(raw) && raw[end] != '"' {
			if raw[end] == '\\' {
				return false
			}
			end++
		}
		if end >= len(raw) {
			return false
		}
		k := memberIndex(names, raw[i+1:end])
		if k < 0 || seen&(1<<k) != 0 {
			return false
		}
		seen |= 1 << k
		i = skipSpace(raw, end+1)
		if i >= len(raw) || raw[i] != ':' {
			return false
		}
		if i = skipValue(raw, skipSpace(raw, i+1)); i < 0 {
			return false
		}
		i = skipSpace(raw, i)
		if i >= len(raw) {
			return false
		}
		switch raw[i] {
		case '}':
			return true
		case ',':
			i = skipSpace(raw, i+1)
		default:
			return false
		}
	}
	return false
}

func memberIndex(names []string, name []byte) int {
	for k, n := range names {
		if n == string(name) {
			return k
		}
	}
	return -1
}

func skipSpace(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index after the value starting at i, -1 when the
// input ends first.
func skipValue(raw []byte, i int) int {
	depth := 0
	for i < len(raw) {
		switch c := raw[i]; c {
		case '"':
			i++
			for i < len(raw) && raw[i] != '"' {
				if raw[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(raw) {
				return -1
			}
			i++
			if depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of the enclosing object
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
		i++
	}
	if depth == 0 {
		return i
	}
	return -1
}

// PlainToken reports whether s is 1..max characters of [A-Za-z0-9._:-].
func PlainToken(s string, maxLen int) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:-", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}
