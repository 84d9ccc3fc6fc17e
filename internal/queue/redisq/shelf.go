package redisq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/queue/redisq/luasrc"
	"smsgw/internal/sms"
)

var _ queue.Shelver = (*Queue)(nil)

// shelf is the ZSET of producer's messages of class c set aside by a
// producer pause: member and score as in the class's ready ZSET (the place
// in line it was taken from).
func (k keys) shelf(c sms.Class, producer string) string {
	return k.tag + "shelf:" + c.String() + ":" + producer
}

// shelved is the HASH class -> messages on shelves, which Stats counts as
// ready (they are queued, and were ready when set aside).
func (k keys) shelved() string { return k.tag + "shelved" }

// setAsideScript ends a held lease and puts the message on its producer's
// shelf, at the place it was taken from, while the producer's pause holds
// (its field in the scoped pauses' HASH, "<until ms; 0: until cleared>|
// <reason>", Redis clock); otherwise back to its place in line.
//
// KEYS[1] lease ZSET of the class, KEYS[2] leases HASH, KEYS[3] msgs HASH,
// KEYS[4] ready ZSET of the class, KEYS[5] shelf ZSET, KEYS[6] shelved
// HASH, KEYS[7] the scoped pauses' HASH.
// ARGV[1] id, ARGV[2] token, ARGV[3] the producer's field in KEYS[7],
// ARGV[4] the class's name.
// Returns 2 when shelved, 1 when put back in line, 0 when the lease is not
// held, -1 when it is not in KEYS[1].
var setAsideScript = redis.NewScript(luasrc.Prelude + luasrc.Record + luasrc.CheckLease + luasrc.Lanes + `
local now = now_us()
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
local m = cjson.decode(redis.call('HGET', KEYS[3], ARGV[1]))
set(m, 's', 'q')
set_time(m, 'tu', now)
redis.call('HSET', KEYS[3], ARGV[1], cjson.encode(m))
local v = redis.call('HGET', KEYS[7], ARGV[3])
if v then
  local u = tonumber(string.match(v, '^(%d+)|'))
  if u ~= nil and (u == 0 or u * 1000 > now) then
    redis.call('ZADD', KEYS[5], lease.s, lease.m)
    redis.call('HINCRBY', KEYS[6], ARGV[4], 1)
    return 2
  end
end
lane_add(KEYS[4], lane_of(m), lease.s, lease.m, now)
return 1
`)

// restoreScript moves up to ARGV[1] members of a shelf back to the ready
// ZSET at their scores; a member whose message is no longer queued (it was
// canceled on the shelf) is dropped.
//
// KEYS[1] shelf ZSET, KEYS[2] msgs HASH, KEYS[3] shelved HASH, KEYS[4]
// ready ZSET of the shelf's class. ARGV[1] most, ARGV[2] the class's name.
// Returns how many it took off the shelf and how many of them it moved.
var restoreScript = redis.NewScript(luasrc.Prelude + luasrc.Lanes + `
local now = now_us()
local items = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
local moved = 0
for i = 1, #items, 2 do
  local member = items[i]
  redis.call('ZREM', KEYS[1], member)
  local raw = redis.call('HGET', KEYS[2], string.sub(member, 18))
  local m = raw and cjson.decode(raw)
  if m and m.s == 'q' then
    lane_add(KEYS[4], lane_of(m), items[i + 1], member, now)
    moved = moved + 1
  end
end
local taken = #items / 2
if taken > 0 and redis.call('HINCRBY', KEYS[3], ARGV[2], -taken) <= 0 then
  redis.call('HDEL', KEYS[3], ARGV[2])
end
return {taken, moved}
`)

// SetAside shelves l's message while its producer's pause holds; see
// queue.Shelver. Without sh.Key it puts the message back in line.
func (q *Queue) SetAside(ctx context.Context, l *queue.Leased, sh queue.Shelf) (err error) {
	if sh.Key == "" {
		return q.Requeue(ctx, l, queue.RequeueOptions{KeepPlace: true})
	}
	if err := q.beginLease(ctx, "set aside", l); err != nil {
		return err
	}
	start := time.Now()
	defer func() { q.m.observe("requeue", start, err) }()
	c := l.Message.Class
	keys := []string{q.k.lease(c), q.k.leases(), q.k.msgs(), q.k.ready(c), q.k.shelf(c, l.Message.Producer), q.k.shelved(), sh.Key}
	cmd := setAsideScript.Run(ctx, q.c, keys, l.Message.ID, l.Token, sh.Field, c.String())
	if n, e := cmd.Int64(); e == nil && n == 2 {
		return nil
	}
	return q.leaseResult("set aside", l, cmd)
}

// Restore moves up to most of producer's shelved messages back in line,
// class by class; see queue.Shelver.
func (q *Queue) Restore(ctx context.Context, producer string, most int) (int, error) {
	if err := q.begin(ctx, "restore"); err != nil {
		return 0, err
	}
	most = min(most, queue.MaxRestore)
	taken := 0
	for _, c := range sms.Classes {
		if most <= 0 {
			break
		}
		keys := []string{q.k.shelf(c, producer), q.k.msgs(), q.k.shelved(), q.k.ready(c)}
		r, err := restoreScript.Run(ctx, q.c, keys, most, c.String()).Int64Slice()
		if err != nil {
			return taken, fmt.Errorf("redisq: restore: %w", err)
		}
		if len(r) != 2 {
			return taken, errors.New("redisq: restore: unexpected reply")
		}
		most -= int(r[0])
		taken += int(r[0])
		if r[1] > 0 {
			q.announce(ctx, []sms.Class{c})
		}
	}
	return taken, nil
}
