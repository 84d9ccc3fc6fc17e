// Package lanes holds the Redis scripts of the queue's sender lanes that
// are not part of another transition (a hold, the backlog read) and the
// digest that names a lane in keys; the lanes' shared Lua fragments are
// luasrc.Lanes, and every script that moves a message uses them.
package lanes

import (
	"context"
	"crypto/sha1" //nolint:gosec // a lane's name, not a secret: the same digest the scripts take (redis.sha1hex)
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/queue/redisq/luasrc"
	"smsgw/internal/sms"
)

// Tag is the tag of a sender lane (queue.LaneOf) in key names: the first
// 16 hex digits of the SHA-1 of the sender, never the number in clear; ""
// for the provider's default sender. luasrc.Lanes' lane_tag computes the
// same in the scripts.
func Tag(lane string) string {
	if lane == "" {
		return ""
	}
	h := sha1.Sum([]byte(lane)) //nolint:gosec // see the import
	return hex.EncodeToString(h[:8])
}

// maxLaneHolds is how many holds the holds HASH keeps before a hold also
// drops the expired ones (a take drops each expired hold it reads).
const maxLaneHolds = 256

// holdScript holds a lane in every class until now + ARGV[2] µs, never
// shortening a longer hold, and scores the lane's index entries again.
//
// KEYS[1..n] the classes' ready keys (luasrc.Lanes derives the rest).
// ARGV[1] the lane's tag ("" the default lane), ARGV[2] the hold µs.
// Returns the hold in force, µs from now.
var holdScript = redis.NewScript(luasrc.Prelude + luasrc.Lanes + `
local now = now_us()
local tag = ARGV[1]
local holds = lane_holds(KEYS[1])
local upto = now + tonumber(ARGV[2])
local cur = lane_hold(KEYS[1], tag, now)
if cur >= upto then return cur - now end
if redis.call('HLEN', holds) >= ` + fmt.Sprint(maxLaneHolds) + ` then
  local all = redis.call('HGETALL', holds)
  for i = 1, #all, 2 do
    if tonumber(all[i + 1]) <= now then redis.call('HDEL', holds, all[i]) end
  end
end
redis.call('HSET', holds, tag, fmt_us(upto))
if tag ~= '' then
  for i = 1, #KEYS do
    if redis.call('ZSCORE', lane_index(KEYS[i]), tag) then lane_rescore(KEYS[i], tag, now) end
  end
end
return upto - now
`)

// Hold runs the hold script: lane held in every class until now+until µs;
// ready are the classes' ready keys.
func Hold(ctx context.Context, c redis.Scripter, ready []string, lane string, until int64) error {
	return holdScript.Run(ctx, c, ready, Tag(lane), until).Err()
}

// readScript reads the backlog of every lane of every class.
//
// KEYS[1..3] the classes' ready keys in sms.Classes order.
// Returns {now µs, then per lane of a class with queued messages: the
// class's position (1..3), the tag, its queued count, its head's score,
// its hold (µs, 0: none), its head's record (for the sender's name; ""
// when gone)}.
var readScript = redis.NewScript(luasrc.Prelude + luasrc.Lanes + `
local now = now_us()
local out = {fmt_us(now)}
local msgs = string.gsub(KEYS[1], 'ready:%a+$', 'msgs')
for i = 1, #KEYS do
  local lanes = redis.call('ZRANGE', lane_index(KEYS[i]), 0, -1)
  table.insert(lanes, 1, '')
  for _, tag in ipairs(lanes) do
    local key = lane_key(KEYS[i], tag)
    local h = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if #h > 0 then
      out[#out + 1] = i
      out[#out + 1] = tag
      out[#out + 1] = redis.call('ZCARD', key)
      out[#out + 1] = h[2]
      out[#out + 1] = fmt_us(lane_hold(KEYS[i], tag, now))
      out[#out + 1] = redis.call('HGET', msgs, id_of(h[1])) or ''
    end
  end
end
return out
`)

// Read reads every lane's backlog in one script (queue.LaneReader); ready
// are the classes' ready keys in sms.Classes order, and decode reads a
// stored message's value (for the lane's sender).
func Read(ctx context.Context, c redis.Scripter, ready []string, decode func(id string, raw any) (*sms.Message, error)) ([]queue.LaneStats, error) {
	reply, err := readScript.Run(ctx, c, ready).Slice()
	if err != nil {
		return nil, fmt.Errorf("redisq: lanes: %w", err)
	}
	if len(reply) < 1 || (len(reply)-1)%6 != 0 {
		return nil, fmt.Errorf("redisq: lanes: unexpected reply of %d values", len(reply))
	}
	now := num(reply[0])
	byTag := map[string]*queue.LaneStats{}
	var order []string
	for i := 1; i < len(reply); i += 6 {
		ci := int(num(reply[i])) - 1
		tag, _ := reply[i+1].(string)
		if ci < 0 || ci >= len(sms.Classes) {
			return nil, fmt.Errorf("redisq: lanes: class %d", ci+1)
		}
		ls, ok := byTag[tag]
		if !ok {
			ls = &queue.LaneStats{Queued: map[sms.Class]int64{}}
			byTag[tag] = ls
			order = append(order, tag)
		}
		if raw, _ := reply[i+5].(string); raw != "" && tag != "" && ls.Lane == "" {
			if m, err := decode("", raw); err == nil {
				ls.Lane = queue.LaneOf(m)
			}
		}
		ls.Queued[sms.Classes[ci]] += num(reply[i+2])
		if head := num(reply[i+3]); head <= now {
			ls.OldestAge = max(ls.OldestAge, time.Duration(now-head)*time.Microsecond)
		}
		if hold := num(reply[i+4]); hold > now {
			ls.HeldFor = time.Duration(hold-now) * time.Microsecond
		}
	}
	out := make([]queue.LaneStats, 0, len(order))
	for _, tag := range order {
		out = append(out, *byTag[tag])
	}
	return out, nil
}

// num reads an integer of a script's reply, sent as a number or as the
// exact decimal text of fmt_us.
func num(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		var n int64
		_, _ = fmt.Sscan(x, &n)
		return n
	}
	return 0
}
