package config

import (
	"strings"
	"testing"
	"time"
)

// The edge's bounds are checked at start-up, each problem naming its key:
// a body of max_body_bytes must fit under the per-producer bound, and that
// under the process's.
func TestEdgeBoundsValidated(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*HTTPConfig)
		key  string // "": valid
	}{
		{"defaults", func(*HTTPConfig) {}, ""},
		{"no idle timeout", func(h *HTTPConfig) { h.IdleTimeout = 0 }, "http.idle_timeout"},
		{"too few connections", func(h *HTTPConfig) { h.MaxConnections = 15 }, "http.max_connections"},
		{"the least connections", func(h *HTTPConfig) { h.MaxConnections = 16 }, ""},
		{"a producer's bound under one body", func(h *HTTPConfig) { h.BodyBytesInFlightPerProducer = h.MaxBodyBytes - 1 },
			"http.body_bytes_in_flight_per_producer"},
		{"the process's bound under a producer's", func(h *HTTPConfig) { h.BodyBytesInFlight = h.BodyBytesInFlightPerProducer - 1 },
			"http.body_bytes_in_flight"},
		{"all three equal", func(h *HTTPConfig) {
			h.BodyBytesInFlight, h.BodyBytesInFlightPerProducer = h.MaxBodyBytes, h.MaxBodyBytes
		}, ""},
	} {
		cfg := valid(t)
		tc.edit(&cfg.HTTP)
		err := cfg.Validate()
		switch {
		case tc.key == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.key != "" && (err == nil || !strings.Contains(err.Error(), tc.key+":")):
			t.Errorf("%s: %v; want %s named", tc.name, err, tc.key)
		}
	}
	if d := Default().HTTP; d.IdleTimeout >= 2*time.Minute || d.MaxConnections <= 0 {
		t.Errorf("defaults %+v: want a short idle timeout and a connection bound", d)
	}
}
