package redisq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/queue/redisq/luasrc"
	"smsgw/internal/sms"
)

// getScript reads a message: its record while it is live or a dead
// letter, else its final record, else the blob of its second (compacted
// final records, compact.go), which the caller reads.
//
// KEYS[1] msgs HASH, KEYS[2] the final LIST of the id, KEYS[3] its
// second's blob. ARGV[1] id.
// Returns {1, stored value}, {2, final record}, {3, blob} or {0}.
var getScript = redis.NewScript(luasrc.Prelude + `
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then return {1, v} end
local f = fin_find(KEYS[2], ARGV[1])
if f then return {2, f} end
local b = redis.call('GET', KEYS[3])
if b then return {3, b} end
return {0}
`)

// Get returns the stored message with id.
func (q *Queue) Get(ctx context.Context, id string) (_ *sms.Message, err error) {
	if err := q.begin(ctx, "get"); err != nil {
		return nil, err
	}
	if !sms.ValidID(id) {
		return nil, fmt.Errorf("redisq: get %q: %w", id, queue.ErrNotFound)
	}
	start := time.Now()
	defer func() { q.m.observe("read", start, err) }()
	created, _ := sms.IDTime(id)
	reply, err := getScript.Run(ctx, q.c, []string{q.k.msgs(), q.k.fin(id), q.k.finBlob(created.Unix())}, id).Slice()
	if err != nil {
		return nil, fmt.Errorf("redisq: get %s: %w", id, err)
	}
	m, err := decodeGet(id, reply)
	if err != nil {
		return nil, fmt.Errorf("redisq: get %s: %w", id, err)
	}
	return m, nil
}

// decodeGet reads a {kind, value} reply of getScript (or of the enqueue
// script's existing message).
func decodeGet(id string, reply []any) (*sms.Message, error) {
	kind, _ := reply[0].(int64)
	switch {
	case kind == 0:
		return nil, queue.ErrNotFound
	case len(reply) != 2:
		return nil, fmt.Errorf("unexpected reply %v", reply)
	case kind == 2:
		s, _ := reply[1].(string)
		return queue.DecodeFinal(id, s)
	case kind == 3:
		blob, _ := reply[1].(string)
		rec, found, err := blobRecord(blob, id)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, queue.ErrNotFound
		}
		return queue.DecodeFinal(id, rec)
	}
	return decodeStored(id, reply[1])
}

// Outstanding is the number of producer's messages queued or leased.
func (q *Queue) Outstanding(ctx context.Context, producer string) (_ int64, err error) {
	if err := q.begin(ctx, "outstanding"); err != nil {
		return 0, err
	}
	start := time.Now()
	defer func() { q.m.observe("read", start, err) }()
	n, err := q.c.HGet(ctx, q.k.outstanding(), producer).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("redisq: outstanding %s: %w", producer, err)
	}
	return n, nil
}

// statsScript reads every class's depth at one instant of the Redis clock.
//
// KEYS[1..3] ready ZSETs, KEYS[4..6] lease ZSETs, KEYS[7..9] dead ZSETs, all
// in sms.Classes order, KEYS[10] the shelved HASH (shelf.go); ARGV[1..3]
// the classes' names in that order.
// Returns {now µs, then per class: ready (with the messages on shelves),
// scheduled, leased, dead, score of the first ready message (-1 if none)}.
var statsScript = redis.NewScript(luasrc.Prelude + luasrc.Lanes + `
local now = now_us()
local out = {now}
for i = 1, 3 do
  local ready, scheduled, head = 0, 0, -1
  for _, key in ipairs(lane_keys(KEYS[i])) do
    local r = redis.call('ZCOUNT', key, '-inf', now)
    ready = ready + r
    scheduled = scheduled + redis.call('ZCOUNT', key, '(' .. fmt_us(now), '+inf')
    if r > 0 then
      local h = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2])
      if head < 0 or h < head then head = h end
    end
  end
  out[#out + 1] = ready + (tonumber(redis.call('HGET', KEYS[10], ARGV[i])) or 0)
  out[#out + 1] = scheduled
  out[#out + 1] = redis.call('ZCARD', KEYS[3 + i])
  out[#out + 1] = redis.call('ZCARD', KEYS[6 + i])
  out[#out + 1] = head
end
return out
`)

// Stats returns every class's depth. OldestAge is how long the head of the
// class has been due (now minus its ready time, on the Redis clock).
func (q *Queue) Stats(ctx context.Context) (_ map[sms.Class]queue.ClassStats, err error) {
	if err := q.begin(ctx, "stats"); err != nil {
		return nil, err
	}
	start := time.Now()
	defer func() { q.m.observe("read", start, err) }()
	keys := slices.Concat(q.k.perClass(q.k.ready), q.k.perClass(q.k.lease), q.k.perClass(q.k.dead), []string{q.k.shelved()})
	reply, err := statsScript.Run(ctx, q.c, keys, sms.ClassOTP.String(), sms.ClassTransactional.String(), sms.ClassMarketing.String()).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("redisq: stats: %w", err)
	}
	if len(reply) != 1+5*len(sms.Classes) {
		return nil, fmt.Errorf("redisq: stats: unexpected reply %v", reply)
	}
	now := reply[0]
	out := make(map[sms.Class]queue.ClassStats, len(sms.Classes))
	for i, c := range sms.Classes {
		r := reply[1+5*i:]
		st := queue.ClassStats{Ready: r[0], Scheduled: r[1], Leased: r[2], Dead: r[3]}
		if r[4] >= 0 {
			st.OldestAge = time.Duration(now-r[4]) * time.Microsecond
		}
		out[c] = st
	}
	return out, nil
}

// scheduledScript counts the scheduled messages of each class due within
// each horizon, at one instant of the Redis clock.
//
// KEYS[1..3] ready ZSETs in sms.Classes order.
// ARGV[1..n] horizons in µs, ascending.
// Returns per class, per horizon: the members scored in (now, now+horizon].
var scheduledScript = redis.NewScript(luasrc.Prelude + luasrc.Lanes + `
local now = now_us()
local out = {}
for i = 1, #KEYS do
  local lanes = lane_keys(KEYS[i])
  for j = 1, #ARGV do
    local n = 0
    for _, key in ipairs(lanes) do
      n = n + redis.call('ZCOUNT', key, '(' .. fmt_us(now), fmt_us(now + tonumber(ARGV[j])))
    end
    out[#out + 1] = n
  end
end
return out
`)

// ScheduledWithin counts scheduled messages by class and horizon; see
// queue.Queue.
func (q *Queue) ScheduledWithin(ctx context.Context, horizons []time.Duration) (_ map[sms.Class][]int64, err error) {
	if err := q.begin(ctx, "scheduled"); err != nil {
		return nil, err
	}
	if err := queue.CheckHorizons(horizons); err != nil {
		return nil, fmt.Errorf("redisq: %w", err)
	}
	start := time.Now()
	defer func() { q.m.observe("read", start, err) }()
	args := make([]any, len(horizons))
	for i, h := range horizons {
		args[i] = us(h)
	}
	reply, err := scheduledScript.Run(ctx, q.c, q.k.perClass(q.k.ready), args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("redisq: scheduled within: %w", err)
	}
	if len(reply) != len(horizons)*len(sms.Classes) {
		return nil, fmt.Errorf("redisq: scheduled within: unexpected reply %v", reply)
	}
	out := make(map[sms.Class][]int64, len(sms.Classes))
	for i, c := range sms.Classes {
		out[c] = reply[i*len(horizons) : (i+1)*len(horizons)]
	}
	return out, nil
}

// DeadLetters returns up to limit dead letters, those that died first first.
func (q *Queue) DeadLetters(ctx context.Context, limit int) (_ []*sms.Message, err error) {
	if err := q.begin(ctx, "dead letters"); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	start := time.Now()
	defer func() { q.m.observe("read", start, err) }()
	// Up to limit from each class, merged by time of death: a read, so a
	// pipeline (one slot, one round trip) rather than a script.
	cmds := make([]*redis.ZSliceCmd, len(sms.Classes))
	_, err = q.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range sms.Classes {
			cmds[i] = p.ZRangeWithScores(ctx, q.k.dead(c), 0, int64(limit-1))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redisq: dead letters: %w", err)
	}
	var all []redis.Z
	for _, cmd := range cmds {
		all = append(all, cmd.Val()...)
	}
	slices.SortStableFunc(all, func(a, b redis.Z) int {
		switch {
		case a.Score < b.Score:
			return -1
		case a.Score > b.Score:
			return 1
		}
		return 0
	})
	if len(all) > limit {
		all = all[:limit]
	}
	if len(all) == 0 {
		return nil, nil
	}
	ids := make([]string, len(all))
	for i, z := range all {
		ids[i], _ = z.Member.(string)
	}
	raws, err := q.c.HMGet(ctx, q.k.msgs(), ids...).Result()
	if err != nil {
		return nil, fmt.Errorf("redisq: dead letters: %w", err)
	}
	out := make([]*sms.Message, 0, len(raws))
	for i, raw := range raws {
		if raw == nil {
			continue // retried and completed between the two reads
		}
		m, err := decodeStored(ids[i], raw)
		if err != nil {
			return nil, fmt.Errorf("redisq: dead letter %s: %w", ids[i], err)
		}
		if m.Dead {
			out = append(out, m)
		}
	}
	return out, nil
}

// retryDeadScript queues a dead letter again, attempts reset, at the back of
// its class.
//
// KEYS[1] msgs HASH, KEYS[2] dead ZSET of the class, KEYS[3] ready ZSET of the
// class, KEYS[4] seq counter, KEYS[5] outstanding HASH, KEYS[6] the
// message's usage HASH (luasrc.Usage).
// ARGV[1] id, ARGV[2..4] the usage field of its failed end, units and
// expiry ms.
// Returns 1, or 0 when id is not a dead letter of that class.
var retryDeadScript = redis.NewScript(luasrc.Prelude + luasrc.Record + luasrc.Usage + luasrc.Lanes + `
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return 0 end
local now = now_us()
local m = cjson.decode(redis.call('HGET', KEYS[1], ARGV[1]))
set(m, 's', 'q')
set(m, 'd', nil)
set(m, 'a', 0)
set(m, 'x', nil)
set(m, 'tb', nil)
set_time(m, 'tu', now)
local member = new_member(redis.call('INCR', KEYS[4]), ARGV[1])
m.qm = member
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(m))
lane_add(KEYS[3], lane_of(m), now, member, now)
redis.call('HINCRBY', KEYS[5], get(m, 'p'), 1)
-- usage: queued again, its failed end no longer counts
usage_add(KEYS[6], ARGV[2], ARGV[3], -1, ARGV[4])
return 1
`)

// RetryDead queues the dead letter id again with its attempts reset.
func (q *Queue) RetryDead(ctx context.Context, id string) (err error) {
	// The class, and so the keys, come from the stored message; a class
	// never changes, so reading it first is safe.
	m, err := q.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("redisq: retry dead letter: %w", err)
	}
	start := time.Now()
	defer func() { q.m.observe("retry_dead", start, err) }()
	use := q.usageOf(m, sms.StatusFailed)
	keys := []string{q.k.msgs(), q.k.dead(m.Class), q.k.ready(m.Class), q.k.seq(), q.k.outstanding(), use.key}
	n, err := retryDeadScript.Run(ctx, q.c, keys, id, use.field, use.units, use.ttl).Int()
	if err != nil {
		return fmt.Errorf("redisq: retry dead letter %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("redisq: retry dead letter %s: not a dead letter: %w", id, queue.ErrNotFound)
	}
	q.log.Info("dead letter queued again", "id", id, "class", m.Class.String())
	return nil
}
