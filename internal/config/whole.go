package config

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// fractionsInIntegers finds numbers with a fraction given to integer keys.
// The YAML decoder truncates them without a word (workers: 2.7 runs 2
// workers, burst: 5.5 a burst of 5); each is a problem naming the key
// instead. root is the parsed document and t the type it decodes onto;
// line tells whether to cite the document's lines (a file) or not (an
// environment variable's value, wrapped in a document of our own).
func fractionsInIntegers(root *yaml.Node, t reflect.Type, line bool) []error {
	var errs []error
	var walk func(n *yaml.Node, t reflect.Type, path string)
	walk = func(n *yaml.Node, t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, t, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				p := keyPath(path, k.Value)
				switch t.Kind() {
				case reflect.Struct:
					if ft, ok := yamlField(t, k.Value); ok {
						walk(v, ft, p)
					}
				case reflect.Map:
					walk(v, t.Elem(), p)
				}
			}
		case yaml.SequenceNode:
			if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
				for i, c := range n.Content {
					walk(c, t.Elem(), itemPath(path, i))
				}
			}
		case yaml.ScalarNode:
			if !isInteger(t) || n.ShortTag() != "!!float" {
				return
			}
			if v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64); err == nil && v == math.Trunc(v) {
				return // 8.0 or 1e3: a whole number, decoded exactly
			}
			where := path
			if line {
				where = fmt.Sprintf("%s (line %d)", path, n.Line)
			}
			errs = append(errs, fmt.Errorf("%s: must be a whole number (got %s)", where, n.Value))
		}
	}
	walk(root, t, "")
	return errs
}

// isInteger reports whether t is an integer kind the decoder would
// truncate a float into (a time.Duration is decoded from text instead).
func isInteger(t reflect.Type) bool {
	if t == reflect.TypeOf(time.Duration(0)) {
		return false
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// yamlField is the type of t's field the YAML key name decodes into,
// looking into inlined structs.
func yamlField(t reflect.Type, name string) (reflect.Type, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if tag == "" && slices.Contains(strings.Split(opts, ","), "inline") {
			if ft, ok := yamlField(f.Type, name); ok {
				return ft, true
			}
			continue
		}
		if tag == "" {
			tag = strings.ToLower(f.Name)
		}
		if tag == name {
			return f.Type, true
		}
	}
	return nil, false
}
