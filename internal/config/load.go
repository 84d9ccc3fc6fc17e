package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

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
func Load(data []byte, environ []string) (Config, error) {
	cfg := Default()
	if err := decodeStrict(data, &cfg); err != nil {
		return Config{}, err
	}
	if err := applyEnv(&cfg, environ); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// decodeStrict decodes one YAML document onto cfg, rejecting unknown keys.
func decodeStrict(data []byte, cfg *Config) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config: %s", nameKeysInYAMLError(data, err))
	}
	// A second document is almost always a mistake (a stray ---).
	var extra any
	if err := dec.Decode(&extra); err == nil {
		return errors.New("config: more than one YAML document")
	}
	return nil
}
