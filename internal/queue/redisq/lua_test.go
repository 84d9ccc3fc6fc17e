package redisq

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue/redisq/luasrc"
	"smsgw/internal/redistest"
)

// isoScript runs the prelude's iso() on ARGV[1]; it touches no key.
var isoScript = redis.NewScript(luasrc.Prelude + `return iso(tonumber(ARGV[1]))`)

// TestLuaISO checks the Lua date formatting against Go's over leap days,
// year and century ends and the µs field.
func TestLuaISO(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	for _, tm := range []time.Time{
		time.Unix(0, 0),
		time.Date(2000, 2, 29, 23, 59, 59, 999999000, time.UTC),
		time.Date(2024, 2, 29, 12, 0, 0, 1000, time.UTC),
		time.Date(2026, 11, 30, 9, 55, 17, 123456000, time.UTC),
		time.Date(2100, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2099, 12, 31, 23, 59, 59, 500000000, time.UTC),
		time.Date(2286, 11, 20, 17, 46, 40, 42000, time.UTC),
	} {
		got, err := isoScript.Run(t.Context(), c, nil, tm.UnixMicro()).Text()
		if err != nil {
			t.Fatalf("iso(%v): %v", tm, err)
		}
		want := tm.UTC().Format("2006-01-02T15:04:05.000000Z")
		if got != want {
			t.Errorf("iso(%d) = %s, want %s", tm.UnixMicro(), got, want)
		}
		parsed, err := time.Parse(time.RFC3339Nano, got)
		if err != nil || !parsed.Equal(tm) {
			t.Errorf("iso(%d) = %s parses to %v, %v", tm.UnixMicro(), got, parsed, err)
		}
	}
}
