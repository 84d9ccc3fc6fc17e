package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRedisLogger: the Redis client's messages become JSON WARN records of
// our logger, at most one per redisLogEvery, with the count of those left
// out, and digit runs masked.
func TestRedisLogger(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_700_000_000, 0)
	l := newRedisLogger(slog.New(slog.NewJSONHandler(&buf, nil)), func() time.Time { return now })
	ctx := context.Background()
	l.Printf(ctx, "redis: connection pool: failed to dial after %d attempts: %s", 5, "dial tcp 127.0.0.1:16399: connect: connection refused")
	for range 3 {
		now = now.Add(time.Second)
		l.Printf(ctx, "redis: connection pool: failed to dial after %d attempts", 5)
	}
	now = now.Add(redisLogEvery)
	l.Printf(ctx, "redis: %s", "+819012345678 in a message")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d records, want 2 (the others left out):\n%s", len(lines), buf.String())
	}
	var recs []map[string]any
	for _, line := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not a JSON record: %q", line)
		}
		recs = append(recs, r)
	}
	if recs[0]["level"] != "WARN" || !strings.Contains(recs[0]["msg"].(string), "failed to dial after 5 attempts") {
		t.Errorf("first record %v", recs[0])
	}
	if recs[1]["not_logged_since_last"] != float64(3) {
		t.Errorf("second record counts %v left out, want 3", recs[1]["not_logged_since_last"])
	}
	if strings.Contains(buf.String(), "9012345678") {
		t.Errorf("a number reached the log: %s", buf.String())
	}
}
