package redisq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// usage is the HASH of producer's usage counters for day
// (queue.UsageDayLayout): field "m<field>" messages and "u<field>" units
// of each queue.UsageCount field. It expires queue.UsageTTL after its last
// change.
func (k keys) usage(day, producer string) string { return k.tag + "use:" + day + ":" + producer }

// usageArgs is what a script needs to count m at status st ("" accepted):
// the HASH, the field, the units and the expiry ms. A malformed id counts
// nothing (an empty field).
type usageArgs struct {
	key, field string
	units, ttl int64
}

func (q *Queue) usageOf(m *sms.Message, st sms.Status) usageArgs {
	u, ok := queue.UsageOf(m, st)
	if !ok {
		return usageArgs{key: q.k.usage("-", m.Producer)}
	}
	return usageArgs{key: q.k.usage(u.Day, m.Producer), field: u.Field, units: u.Units,
		ttl: queue.UsageTTL(q.retention).Milliseconds()}
}

// Usage reads the counters of producers for the days from..to, one
// pipelined HGETALL per producer and day; see queue.UsageReader.
func (q *Queue) Usage(ctx context.Context, producers []string, from, to time.Time) ([]queue.UsageRow, error) {
	if err := q.begin(ctx, "usage"); err != nil {
		return nil, err
	}
	days := queue.UsageDays(from, to)
	type read struct {
		day, producer string
		cmd           *redis.MapStringStringCmd
	}
	var reads []read
	pipe := q.c.Pipeline()
	for _, day := range days {
		for _, p := range producers {
			reads = append(reads, read{day, p, pipe.HGetAll(ctx, q.k.usage(day, p))})
		}
	}
	if len(reads) == 0 {
		return nil, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redisq: usage: %w", err)
	}
	var out []queue.UsageRow
	for _, r := range reads {
		h, err := r.cmd.Result()
		if err != nil {
			return nil, fmt.Errorf("redisq: usage: %w", err)
		}
		for f, v := range h {
			field, ok := strings.CutPrefix(f, "m")
			if !ok {
				continue
			}
			row, err := queue.ParseUsageField(field)
			if err != nil {
				return nil, fmt.Errorf("redisq: usage: %w", err)
			}
			row.Day, row.Producer = r.day, r.producer
			row.Messages, _ = strconv.ParseInt(v, 10, 64)
			row.Units, _ = strconv.ParseInt(h["u"+field], 10, 64)
			if row.Messages > 0 {
				out = append(out, row)
			}
		}
	}
	queue.SortUsage(out)
	return out, nil
}

// usageArgs appends the usage arguments of one message (see enqueueScript).
func (c *scriptCall) usageArgs(u usageArgs) {
	if u.field == "" {
		c.args = append(c.args, 0, "", 0, 0)
		return
	}
	c.args = append(c.args, c.index(u.key), u.field, u.units, u.ttl)
}
