package config

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"smsgw/internal/sms"
)

// EnvPrefix starts every environment override.
const EnvPrefix = "SMSGW_"

// envPaths lists every overridable key path of Config, as yaml paths
// ("limits.classes.marketing.max_rps") mapped to the field. The senders'
// limits are one key (SMSGW_LIMITS_SENDERS='{Mkt1: {max_rps: 3}}'): a
// sender's name is not an environment variable's.
func envPaths(v reflect.Value, prefix string, out map[string]reflect.Value) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		fv := v.Field(i)
		if name == "" && slices.Contains(strings.Split(opts, ","), "inline") {
			// An inlined struct's keys sit directly under prefix
			// (provider.url is httpprov.Settings.URL).
			envPaths(fv, prefix, out)
			continue
		}
		if name == "" || name == "-" {
			continue
		}
		path := keyPath(prefix, name)
		switch {
		case f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)):
			out[path] = fv
			envPaths(fv, path, out)
		case f.Type.Kind() == reflect.Map && f.Type.Elem().Kind() == reflect.Struct && path != "limits.senders":
			out[path] = fv
			// Maps keyed by class: every class name is a possible key.
			for _, c := range sms.Classes {
				out[path+"."+c.String()] = reflect.Value{} // marker: map entry, handled in applyEnv
				entryPaths(f.Type.Elem(), path+"."+c.String(), out)
			}
		default:
			out[path] = fv
		}
	}
}

// entryPaths marks the key paths inside a map entry of type t (struct
// fields nested, as limits.classes.marketing.quiet_hours.from).
func entryPaths(t reflect.Type, prefix string, out map[string]reflect.Value) {
	for j := 0; j < t.NumField(); j++ {
		sub, _, _ := strings.Cut(t.Field(j).Tag.Get("yaml"), ",")
		out[prefix+"."+sub] = reflect.Value{}
		if ft := t.Field(j).Type; ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Duration(0)) {
			entryPaths(ft, prefix+"."+sub, out)
		}
	}
}

func envName(path string) string {
	return EnvPrefix + strings.ToUpper(strings.NewReplacer(".", "_").Replace(path))
}

// applyEnv overrides keys from SMSGW_* variables. The value is parsed as YAML
// into the field, so scalars, durations ("5s") and lists
// (SMSGW_PRODUCERS='[{name: a, ...}]') all work. An SMSGW_ variable that
// names no key is an error: a typo must not be silently ignored.
func applyEnv(cfg *Config, environ []string) error {
	paths := map[string]reflect.Value{}
	envPaths(reflect.ValueOf(cfg).Elem(), "", paths)
	byEnv := map[string]string{}
	for p := range paths {
		byEnv[envName(p)] = p
	}
	var errs []error
	// Apply in a stable order: shorter paths (whole sections) before the
	// keys inside them, so SMSGW_LIMITS then SMSGW_LIMITS_BURST composes.
	type kv struct{ name, path, val string }
	var todo []kv
	for _, e := range environ {
		name, val, ok := strings.Cut(e, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		p, known := byEnv[name]
		if !known {
			if isReservedEnv(name) {
				continue
			}
			errs = append(errs, fmt.Errorf("%s: environment variable names no configuration key", name))
			continue
		}
		todo = append(todo, kv{name, p, val})
	}
	slices.SortFunc(todo, func(a, b kv) int { return len(a.path) - len(b.path) })
	for _, x := range todo {
		// A string key takes the value as it is: parsed as YAML, a password
		// "0123" would become 83 and a hex digest of digits a float.
		if f := paths[x.path]; f.IsValid() && f.Kind() == reflect.String {
			f.SetString(x.val)
			continue
		}
		if err := setPath(cfg, x.path, x.val); err != nil {
			errs = append(errs, fmt.Errorf("%s (from %s): %w", x.path, x.name, err))
		}
	}
	if err := applyWebhookSecrets(cfg, environ); err != nil {
		errs = append(errs, err)
	}
	return joinErrors(errs)
}

// isReservedEnv lets variables that are not configuration keys but are
// read elsewhere (tests, the CLI) share the prefix.
func isReservedEnv(name string) bool {
	return name == "SMSGW_CONFIG" || strings.HasPrefix(name, "SMSGW_SKIP_") || strings.HasPrefix(name, "SMSGW_TEST_") ||
		isWebhookSecretEnv(name) // applyWebhookSecrets
}

// setPath decodes val as YAML into the key at path, by rebuilding a small
// YAML document around it and decoding strictly on top of cfg.
func setPath(cfg *Config, path, val string) error {
	parts := strings.Split(path, ".")
	node := yamlScalarOrValue(val)
	if len(parts) >= 4 && parts[0] == "limits" && parts[1] == "classes" {
		// yaml decodes a map entry afresh; carry the entry's other fields
		// so SMSGW_LIMITS_CLASSES_MARKETING_BURST keeps max_rps.
		entry, err := classEntry(cfg.Limits.Classes[parts[2]])
		if err != nil {
			return err
		}
		setIn(entry, parts[3:], node)
		node = map[string]any{"limits": map[string]any{"classes": map[string]any{parts[2]: entry}}}
		parts = nil
	}
	for i := len(parts) - 1; i >= 0; i-- {
		node = map[string]any{parts[i]: node}
	}
	doc, err := yaml.Marshal(node)
	if err != nil {
		return err
	}
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err == nil {
		if errs := fractionsInIntegers(&root, reflect.TypeOf(cfg), false); len(errs) > 0 {
			for i, e := range errs { // the caller names the key already
				if rest, ok := strings.CutPrefix(e.Error(), path+": "); ok {
					errs[i] = errors.New(rest)
				}
			}
			return errors.Join(errs...)
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		return errors.New(withoutLines(err))
	}
	return nil
}

// withoutLines is a decoder error about a document setPath built: its
// "line N:" prefixes point into that document, not anything the operator
// wrote, so they are dropped.
func withoutLines(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n")
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		l = strings.TrimSpace(l)
		var n int
		if _, err := fmt.Sscanf(l, "line %d:", &n); err == nil {
			l = strings.TrimSpace(strings.TrimPrefix(l, fmt.Sprintf("line %d:", n)))
		}
		lines[i] = l
	}
	return strings.Join(lines, "; ")
}

// classEntry is a class's limits as a YAML map, every field included.
func classEntry(cl ClassLimits) (map[string]any, error) {
	b, err := yaml.Marshal(cl)
	if err != nil {
		return nil, err
	}
	entry := map[string]any{}
	if err := yaml.Unmarshal(b, &entry); err != nil {
		return nil, err
	}
	return entry, nil
}

// setIn sets the value at path inside m, making the maps on the way.
func setIn(m map[string]any, path []string, v any) {
	for _, k := range path[:len(path)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}

// yamlScalarOrValue parses val as YAML so that lists and maps in an
// environment variable work; a value that is not valid YAML is taken as a
// plain string.
func yamlScalarOrValue(val string) any {
	var v any
	if err := yaml.Unmarshal([]byte(val), &v); err != nil || v == nil {
		return val
	}
	return v
}
