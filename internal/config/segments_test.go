package config

import (
	"strings"
	"testing"
)

// With counted segments the limiter's burst bounds a message when it is
// below messages.max_segments (the defaults: 5 < 10); a class's own
// smaller burst bounds that class; uncounted, only max_segments holds.
func TestSegmentsPerMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		class string
		most  int
		key   string
	}{
		{"defaults", nil, "transactional", 5, "limits.burst"},
		{"defaults marketing (burst 0: the global one)", nil, "marketing", 5, "limits.burst"},
		{"max_segments below burst", func(c *Config) { c.Messages.MaxSegments = 3 }, "otp", 3, "messages.max_segments"},
		{"class burst smaller", func(c *Config) {
			c.Limits.Classes = map[string]ClassLimits{"marketing": {MaxRPS: 70, Burst: 2}}
		}, "marketing", 2, "limits.classes.marketing.burst"},
		{"class burst larger", func(c *Config) {
			c.Limits.Classes = map[string]ClassLimits{"marketing": {MaxRPS: 70, Burst: 8}}
		}, "marketing", 5, "limits.burst"},
		{"segments not counted", func(c *Config) { c.Provider.CountSegments = false }, "transactional", 10, "messages.max_segments"},
	} {
		cfg := Default()
		if tc.edit != nil {
			tc.edit(&cfg)
		}
		if most, key := cfg.SegmentsPerMessage(tc.class); most != tc.most || key != tc.key {
			t.Errorf("%s: %d (%s), want %d (%s)", tc.name, most, key, tc.most, tc.key)
		}
	}
	cfg := Default()
	if s := cfg.SegmentsSummary(); !strings.Contains(s, "at most 5 per message (limits.burst") || strings.Contains(s, "marketing") {
		t.Errorf("defaults: %q, want one line naming limits.burst", s)
	}
	cfg.Limits.Classes = map[string]ClassLimits{"marketing": {MaxRPS: 70, Burst: 2}}
	if s := cfg.SegmentsSummary(); !strings.Contains(s, "marketing at most 2 per message (limits.classes.marketing.burst") {
		t.Errorf("marketing burst 2: %q, want it named per class", s)
	}
}
