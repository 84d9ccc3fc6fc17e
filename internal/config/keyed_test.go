package config

import (
	"strings"
	"testing"
)

// producers[].max_keyed_per_day: 0 is the default bound, a value is that
// many a day all at once, and a value out of range stops start-up naming
// the key.
func TestMaxKeyedPerDay(t *testing.T) {
	doc := func(extra string) []byte {
		return []byte(`
provider: {url: "http://127.0.0.1:9100/send"}
producers:
  - {name: notify, key: "app-key-0123456789ab", classes: [transactional], rate: 1, burst: 1` + extra + `}
`)
	}
	cfg, err := Load(doc(""), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Producers[0].KeyedRate(); r.Burst != DefaultMaxKeyedPerDay || r.PerSecond*86400 < DefaultMaxKeyedPerDay-1 {
		t.Errorf("default quota %+v", r)
	}
	cfg, err = Load(doc(", max_keyed_per_day: 500"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Producers[0].KeyedRate(); r.Burst != 500 {
		t.Errorf("quota %+v, want 500 a day", r)
	}
	for _, v := range []string{"-1", "100000001"} {
		_, err := Load(doc(", max_keyed_per_day: "+v), nil)
		if err == nil || !strings.Contains(err.Error(), "producers[0] (notify).max_keyed_per_day") {
			t.Errorf("max_keyed_per_day %s: %v, want an error naming the key", v, err)
		}
	}
}
