package deploy_test

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"smsgw/internal/config"
)

// configReference is the page that lists every configuration key.
const configReference = "../docs/configuration.md"

// configKeys walks t's yaml tags and returns every leaf key's path as the
// reference writes it: a list of structs as producers[].name, a map of
// structs as limits.classes.<class>.max_rps, an inlined struct's keys
// under its parent.
func configKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" && slices.Contains(strings.Split(opts, ","), "inline") {
			out = append(out, configKeys(f.Type, prefix)...)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		path := prefix + name
		ft := f.Type
		switch {
		case ft.Kind() == reflect.Struct && ft.PkgPath() != "time":
			out = append(out, configKeys(ft, path+".")...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out = append(out, configKeys(ft.Elem(), path+"[].")...)
		case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
			out = append(out, configKeys(ft.Elem(), path+".<"+singular(name)+">.")...)
		default:
			out = append(out, path)
		}
	}
	return out
}

// singular names one entry of a map key: classes → class.
func singular(s string) string {
	if strings.HasSuffix(s, "es") {
		return strings.TrimSuffix(s, "es")
	}
	return strings.TrimSuffix(s, "s")
}

// refRow is a table row of the reference whose first cell is one key.
var refRow = regexp.MustCompile("(?m)^\\| `([a-z0-9_.<>\\[\\]]+)` \\|")

// TestConfigReference: every key the configuration structs take has a row
// of its own in docs/configuration.md, and every row names a key they
// take, so a key added, renamed or removed in internal/config fails here
// until the reference says so.
func TestConfigReference(t *testing.T) {
	keys := configKeys(reflect.TypeFor[config.Config](), "")
	if len(keys) < 50 {
		t.Fatalf("only %d configuration keys found: is the walk of the yaml tags still right?", len(keys))
	}
	rows := map[string]bool{}
	for _, m := range refRow.FindAllStringSubmatch(string(readFile(t, configReference)), -1) {
		rows[m[1]] = true
	}
	known := map[string]bool{}
	for _, k := range keys {
		known[k] = true
		if !rows[k] {
			t.Errorf("%s has no row for the configuration key %s", configReference, k)
		}
	}
	for r := range rows {
		if !known[r] {
			t.Errorf("%s has a row for %s, which is no configuration key", configReference, r)
		}
	}
}
