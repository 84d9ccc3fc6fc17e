package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// bUsage holds the usage counters (queue.UsageCount), keyed
// "<day>\x00<producer>\x00<field>", the value messages(8) units(8): one
// day's keys are together, oldest day first, so pruning walks from the
// first key.
var bUsage = []byte("usage")

func usageKey(day, producer, field string) []byte {
	k := make([]byte, 0, len(day)+len(producer)+len(field)+2)
	k = append(k, day...)
	k = append(k, 0)
	k = append(k, producer...)
	k = append(k, 0)
	return append(k, field...)
}

// countUsage adds n of m (live, with its full number) at status st (""
// accepted) to its producer's usage, in the caller's transaction.
func countUsage(tx *bolt.Tx, m *sms.Message, st sms.Status, n int64) error {
	u, ok := queue.UsageOf(m, st)
	if !ok {
		return nil
	}
	b, err := tx.CreateBucketIfNotExists(bUsage)
	if err != nil {
		return err
	}
	k := usageKey(u.Day, m.Producer, u.Field)
	var msgs, units int64
	if v := b.Get(k); len(v) == 16 {
		msgs, units = int64(binary.BigEndian.Uint64(v[:8])), int64(binary.BigEndian.Uint64(v[8:]))
	}
	msgs += n
	units += n * u.Units
	if msgs <= 0 {
		return b.Delete(k)
	}
	return b.Put(k, append(u64(msgs), u64(units)...))
}

// Usage reads the counters of producers for the days from..to; see
// queue.UsageReader.
func (q *Queue) Usage(ctx context.Context, producers []string, from, to time.Time) ([]queue.UsageRow, error) {
	days := queue.UsageDays(from, to)
	want := make(map[string]bool, len(producers))
	for _, p := range producers {
		want[p] = true
	}
	var out []queue.UsageRow
	err := q.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bUsage)
		if b == nil || len(days) == 0 {
			return nil
		}
		c := b.Cursor()
		last := []byte(days[len(days)-1] + "\x01")
		for k, v := c.Seek([]byte(days[0])); k != nil && bytes.Compare(k, last) < 0; k, v = c.Next() {
			parts := bytes.SplitN(k, []byte{0}, 3)
			if len(parts) != 3 || len(v) != 16 || !want[string(parts[1])] {
				continue
			}
			row, err := queue.ParseUsageField(string(parts[2]))
			if err != nil {
				return err
			}
			row.Day, row.Producer = string(parts[0]), string(parts[1])
			row.Messages, row.Units = int64(binary.BigEndian.Uint64(v[:8])), int64(binary.BigEndian.Uint64(v[8:]))
			out = append(out, row)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: usage: %w", err)
	}
	queue.SortUsage(out)
	return out, nil
}

// pruneUsage deletes up to one chunk of the counters of days that ended
// queue.UsageTTL ago.
func (q *Queue) pruneUsage(ctx context.Context) error {
	cutoff := []byte(queue.UsageDay(q.now().Add(-queue.UsageTTL(q.retention))).Format(queue.UsageDayLayout))
	var stale [][]byte
	err := q.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bUsage)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, _ := c.First(); k != nil && len(stale) < chunk && bytes.Compare(k, cutoff) < 0; k, _ = c.Next() {
			stale = append(stale, append([]byte(nil), k...))
		}
		return nil
	})
	if err != nil {
		return err
	}
	return q.deleteKeys(ctx, bUsage, stale)
}
