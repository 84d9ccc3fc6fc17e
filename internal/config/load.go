package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// LoadFile reads the YAML file at path (empty path: defaults only) and
// applies the environment of the process.
func LoadFile(path string) (Config, error) {
	var data []byte
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
		data = b
	}
	return Load(data, os.Environ())
}

// Load builds a Config from YAML bytes and an environment (KEY=VALUE list):
// defaults, strict decode, env overrides, Validate. Errors name the key.
//
// Every problem is reported at once: keys the file names wrongly or with a
// value of the wrong type, environment variables, and what validation
// finds in the rest. Only a file that is not YAML at all stops at that.
func Load(data []byte, environ []string) (Config, error) {
	cfg := Default()
	var all []error
	if err := decodeStrict(data, &cfg); err != nil {
		var keyed *Error
		if !errors.As(err, &keyed) {
			return Config{}, err // not YAML: nothing else can be read
		}
		all = append(all, keyed.Problems...)
	}
	if err := applyEnv(&cfg, environ); err != nil {
		all = append(all, problemsOf(err)...)
	}
	if err := cfg.Validate(); err != nil {
		all = append(all, problemsOf(err)...)
	}
	if err := joinErrors(all); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// problemsOf is the problems an *Error holds, or err alone.
func problemsOf(err error) []error {
	var e *Error
	if errors.As(err, &e) {
		return e.Problems
	}
	return []error{err}
}

// decodeStrict decodes one YAML document onto cfg, rejecting unknown keys.
// Keys that are unknown or hold a value of the wrong type are an *Error,
// one problem each, after the rest of the document was decoded.
func decodeStrict(data []byte, cfg *Config) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var keyed []error
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		msg := nameKeysInYAMLError(data, err)
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return fmt.Errorf("config: %s", msg)
		}
		for _, line := range strings.Split(msg, "\n")[1:] { // after "unmarshal errors:"
			if line = strings.TrimSpace(line); line != "" {
				keyed = append(keyed, errors.New(line))
			}
		}
		if len(keyed) == 0 {
			return fmt.Errorf("config: %s", msg)
		}
	}
	var root yaml.Node
	if yaml.Unmarshal(data, &root) == nil {
		keyed = append(keyed, fractionsInIntegers(&root, reflect.TypeOf(cfg), true)...)
	}
	if len(keyed) > 0 {
		return &Error{Problems: keyed}
	}
	// A second document is almost always a mistake (a stray ---).
	var extra any
	if err := dec.Decode(&extra); err == nil {
		return errors.New("config: more than one YAML document")
	}
	return nil
}
