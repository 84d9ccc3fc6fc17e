package providertest

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"smsgw/internal/provider/httpprov"
)

// SettingsCase is one adapter's account settings and the keys of them that
// its Validate and New must name as missing (none: the settings are whole).
type SettingsCase[S any] struct {
	Settings S
	Missing  []string
}

// SettingsOneRule checks that an adapter has one rule for its account
// settings: validate names each missing key under the prefix it is given
// (the configuration passes "provider."+name), and build (the adapter's
// New; it closes what it built) refuses exactly the same settings, naming
// them under name.
func SettingsOneRule[S any](t *testing.T, name string, cases []SettingsCase[S], validate func(S, string) error, build func(S) error) {
	t.Helper()
	for _, tc := range cases {
		if got := settingKeys(validate(tc.Settings, "provider."+name)); !slices.Equal(got, prefixed("provider."+name, tc.Missing)) {
			t.Errorf("Validate(%+v) named %v, want %v", tc.Settings, got, tc.Missing)
		}
		if got := settingKeys(build(tc.Settings)); !slices.Equal(got, prefixed(name, tc.Missing)) {
			t.Errorf("New(%+v) named %v, want %v", tc.Settings, got, tc.Missing)
		}
	}
}

// BadSetting is an adapter's configuration with one bad connection
// setting, and the key its New must name.
type BadSetting[C any] struct {
	Config C
	Key    string
}

// NamesBadSetting checks that build (the adapter's New; it closes what it
// built) refuses each configuration with a *httpprov.SettingError naming
// its key.
func NamesBadSetting[C any](t *testing.T, cases []BadSetting[C], build func(C) error) {
	t.Helper()
	for i, tc := range cases {
		err := build(tc.Config)
		var se *httpprov.SettingError
		if !errors.As(err, &se) || se.Key != tc.Key {
			t.Errorf("case %d: New = %v, want an error naming %s", i, err, tc.Key)
		}
	}
}

// Closing is an adapter's New as NamesBadSetting and SettingsOneRule call
// it: what it built has its connections closed at once.
func Closing[C any, P interface{ CloseIdleConnections() }](newAdapter func(C) (P, error)) func(C) error {
	return func(cfg C) error {
		p, err := newAdapter(cfg)
		if err == nil {
			p.CloseIdleConnections()
		}
		return err
	}
}

// settingKeys lists the keys a (joined) settings error names, one line per
// key.
func settingKeys(err error) []string {
	if err == nil {
		return nil
	}
	var keys []string
	for line := range strings.SplitSeq(err.Error(), "\n") {
		k, _, _ := strings.Cut(line, ": ")
		keys = append(keys, k)
	}
	return keys
}

func prefixed(prefix string, names []string) []string {
	var out []string
	for _, n := range names {
		out = append(out, prefix+"."+n)
	}
	return out
}
