package state

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"
)

// A recipient's keyword (POST /v1/inbound) changes the suppression list
// once: the list remembers every inbound message it applied for
// AppliedMemory, so that the vendor's retry or a captured request replayed
// changes nothing (Applied, RememberApplied), and a recipient's opt-in
// lifts an entry only when the message is newer than the entry
// (LiftOlder), so that a START replayed after the memory of it ended
// cannot lift a later STOP.
const (
	// AppliedMemory is how long an applied inbound message is
	// remembered: past Vonage's 24 hours of retries, with a day to spare.
	AppliedMemory = 48 * time.Hour
	// MaxApplied bounds the memory: past it the oldest are forgotten first
	// (LiftOlder still stands behind them).
	MaxApplied = 100_000
)

// LiftNewer is LiftOlder's answer when the entry is newer than the
// message: nothing changed.
const LiftNewer LiftResult = 3

// appliedStore is what both lists add for inbound messages; Suppressions
// embeds it.
type appliedStore interface {
	// Applied reports whether the inbound message known by key (ValidKey:
	// the keyed hash of adapter and vendor id) was applied within
	// AppliedMemory, on any handle.
	Applied(ctx context.Context, key string) (bool, error)
	// RememberApplied records that the message known by key was applied,
	// for AppliedMemory; past the store's bound (MaxApplied) the oldest
	// are forgotten first.
	RememberApplied(ctx context.Context, key string) error
	// LiftOlder is Lift for a recipient's opt-in received at at: the entry
	// goes only when it was not created after at, both in whole seconds
	// (UTC); else LiftNewer and nothing changes. A STOP and a START within
	// one second are taken in the order they arrive.
	LiftOlder(ctx context.Context, id string, at time.Time, sources ...SuppressionSource) (LiftResult, error)
}

// stamp is a time as entries store CreatedAt once truncated to the
// second: RFC 3339 in UTC, which sorts as the time does.
func stamp(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

// appliedScript remembers one applied message, on Redis's clock.
//
//	KEYS[1]  ZSET member → end of memory (Unix ms)
//	ARGV[1]  member
//	ARGV[2]  memory (ms)
//	ARGV[3]  bound
var appliedScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local over = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[3])
if over > 0 then redis.call('ZPOPMIN', KEYS[1], over) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// isAppliedScript: 1 when ARGV[1] is remembered and its memory has not
// ended on Redis's clock.
var isAppliedScript = redis.NewScript(`
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
local t = redis.call('TIME')
if tonumber(s) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then return 1 end
return 0
`)

// maxApplied is the bound of r's memory of applied messages.
func (r *RedisSuppressions) maxApplied() int {
	if r.appliedMax > 0 {
		return r.appliedMax
	}
	return MaxApplied
}

// SetMaxApplied lowers the bound of the memory of applied messages (tests).
func (r *RedisSuppressions) SetMaxApplied(n int) { r.appliedMax = n }

// Applied implements Suppressions.
func (r *RedisSuppressions) Applied(ctx context.Context, key string) (bool, error) {
	if !ValidKey(key) {
		return false, ErrInvalidKey
	}
	n, err := isAppliedScript.Run(ctx, r.c, []string{r.k.inboundApplied()}, key).Int()
	if err != nil {
		return false, redisErr("applied", err)
	}
	return n == 1, nil
}

// RememberApplied implements Suppressions.
func (r *RedisSuppressions) RememberApplied(ctx context.Context, key string) error {
	if !ValidKey(key) {
		return ErrInvalidKey
	}
	if err := appliedScript.Run(ctx, r.c, []string{r.k.inboundApplied()}, key, AppliedMemory.Milliseconds(), r.maxApplied()).Err(); err != nil {
		return redisErr("remember applied", err)
	}
	return nil
}

// LiftOlder implements Suppressions.
func (r *RedisSuppressions) LiftOlder(ctx context.Context, id string, at time.Time, sources ...SuppressionSource) (LiftResult, error) {
	if err := checkLift(id, sources); err != nil {
		return LiftAbsent, err
	}
	return r.runLift(ctx, "lift", id, stamp(at), sources)
}

var (
	bApplied      = []byte("inbound_applied")       // key → end of memory, 8 bytes Unix ms big-endian
	bAppliedOrder = []byte("inbound_applied_order") // end of memory (8 bytes) + key → nothing, oldest first
	metaApplied   = []byte("applied_count")
)

// initApplied creates the buckets of the memory of applied messages.
func initApplied(tx *bolt.Tx) error {
	if _, err := tx.CreateBucketIfNotExists(bApplied); err != nil {
		return err
	}
	_, err := tx.CreateBucketIfNotExists(bAppliedOrder)
	return err
}

// SetMaxApplied lowers the bound of the memory of applied messages (tests).
func (l *LocalSuppressions) SetMaxApplied(n int) { l.appliedMax = n }

// Applied implements Suppressions.
func (l *LocalSuppressions) Applied(ctx context.Context, key string) (bool, error) {
	if !ValidKey(key) {
		return false, ErrInvalidKey
	}
	if err := ctx.Err(); err != nil {
		return false, localErr("applied", err)
	}
	now := l.clock().UnixMilli()
	found := false
	err := l.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bApplied).Get([]byte(key))
		found = len(v) == 8 && int64(binary.BigEndian.Uint64(v)) > now
		return nil
	})
	if err != nil {
		return false, localErr("applied", err)
	}
	return found, nil
}

// RememberApplied implements Suppressions: the ended and, past the bound,
// the oldest memories go first, in the same transaction.
func (l *LocalSuppressions) RememberApplied(ctx context.Context, key string) error {
	if !ValidKey(key) {
		return ErrInvalidKey
	}
	if err := ctx.Err(); err != nil {
		return localErr("remember applied", err)
	}
	now := l.clock().UnixMilli()
	limit := MaxApplied
	if l.appliedMax > 0 {
		limit = l.appliedMax
	}
	err := l.db.Update(func(tx *bolt.Tx) error {
		byKey, order, meta := tx.Bucket(bApplied), tx.Bucket(bAppliedOrder), tx.Bucket(bMeta)
		n := 0
		if b := meta.Get(metaApplied); len(b) == 8 {
			n = int(binary.BigEndian.Uint64(b))
		}
		if old := byKey.Get([]byte(key)); len(old) == 8 {
			if err := order.Delete(append(append([]byte(nil), old...), key...)); err != nil {
				return err
			}
			n--
		}
		c := order.Cursor()
		for k, _ := c.First(); len(k) > 8; k, _ = c.First() {
			if int64(binary.BigEndian.Uint64(k[:8])) > now && n < limit {
				break
			}
			if err := byKey.Delete(k[8:]); err != nil {
				return err
			}
			if err := c.Delete(); err != nil {
				return err
			}
			n--
		}
		end := binary.BigEndian.AppendUint64(nil, uint64(now+AppliedMemory.Milliseconds())) //nolint:gosec // a positive time
		if err := byKey.Put([]byte(key), end); err != nil {
			return err
		}
		if err := order.Put(append(end, key...), nil); err != nil {
			return err
		}
		return meta.Put(metaApplied, binary.BigEndian.AppendUint64(nil, uint64(max(n+1, 0)))) //nolint:gosec // not negative
	})
	if err != nil {
		return localErr("remember applied", err)
	}
	return nil
}

// LiftOlder implements Suppressions, in one transaction.
func (l *LocalSuppressions) LiftOlder(ctx context.Context, id string, at time.Time, sources ...SuppressionSource) (LiftResult, error) {
	return l.liftAt(ctx, "lift", id, &at, sources)
}
