package redisq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// maxBatch bounds one enqueue script so that Redis is never blocked long.
const maxBatch = 1000

// enqueueScript stores messages, each at most once per id and per
// (producer, idempotency key).
//
// KEYS[1] msgs HASH, KEYS[2] seq counter, KEYS[3] outstanding HASH,
// KEYS[4..] the ready ZSETs, idempotency keys and final LISTs the messages
// name.
// ARGV[1] idempotency window ms; then seven per message: id, record JSON,
// ready delay µs, index in KEYS of its ready ZSET, index in KEYS of its
// idempotency key (0: none), index in KEYS of its final LIST, and the id
// its idempotency key may be taken from (empty: none; see below).
// Returns one reply per message, in order: {0|1 existed, stored value, its
// id}, {2, final record, its id} for one already final, or {3, empty, first
// id} when its idempotency key names a first message no longer in msgs
// (nothing stored: the caller looks for the first's final record, and
// enqueues again naming that id as the last ARGV when there is none).
var enqueueScript = redis.NewScript(luaPrelude + `
local now = now_us()
local out = {}
local fins = {}
for i = 2, #ARGV, 7 do
  local id = ARGV[i]
  local ik = tonumber(ARGV[i + 4])
  local existing = false
  if ik > 0 and not redis.call('SET', KEYS[ik], id, 'NX', 'PX', ARGV[1]) then
    local first = redis.call('GET', KEYS[ik])
    existing = redis.call('HGET', KEYS[1], first)
    if existing then
      out[#out + 1] = {1, existing, first}
    elseif first == ARGV[i + 6] then
      -- the first message was pruned: the key now maps to this one
      redis.call('SET', KEYS[ik], id, 'PX', ARGV[1])
    else
      out[#out + 1] = {3, '', first}
      existing = true
    end
  end
  if not existing then
    -- the same id stored before (a retried enqueue) is not stored twice
    existing = redis.call('HGET', KEYS[1], id)
    if existing then
      out[#out + 1] = {1, existing, id}
    else
      existing = fin_index(fins, KEYS[tonumber(ARGV[i + 5])])[id] or false
      if existing then out[#out + 1] = {2, existing, id} end
    end
  end
  if not existing then
    local m = cjson.decode(ARGV[i + 1])
    m.s = 'q'
    m.tu = math.floor(now / 1000)
    if not m.tc then m.tc = m.tu end
    local member = new_member(redis.call('INCR', KEYS[2]), id)
    m.qm = member
    local js = cjson.encode(m)
    redis.call('HSET', KEYS[1], id, js)
    redis.call('ZADD', KEYS[tonumber(ARGV[i + 3])], now + tonumber(ARGV[i + 2]), member)
    redis.call('HINCRBY', KEYS[3], m.p, 1)
    out[#out + 1] = {0, js, id}
  end
end
return out
`)

// Enqueue stores m; see queue.Queue.
func (q *Queue) Enqueue(ctx context.Context, m *sms.Message) (queue.EnqueueResult, error) {
	res, err := q.EnqueueMany(ctx, []*sms.Message{m})
	if err != nil {
		return queue.EnqueueResult{}, err
	}
	if res[0].Err != nil {
		return res[0], res[0].Err
	}
	return res[0], nil
}

// EnqueueMany stores ms, up to maxBatch messages per atomic script.
func (q *Queue) EnqueueMany(ctx context.Context, ms []*sms.Message) ([]queue.EnqueueResult, error) {
	if err := q.begin(ctx, "enqueue"); err != nil {
		return nil, err
	}
	results := make([]queue.EnqueueResult, len(ms))
	for lo := 0; lo < len(ms); lo += maxBatch {
		hi := min(lo+maxBatch, len(ms))
		if err := q.enqueueBatch(ctx, ms[lo:hi], results[lo:hi]); err != nil {
			return nil, err
		}
	}
	return results, nil
}

func (q *Queue) enqueueBatch(ctx context.Context, ms []*sms.Message, results []queue.EnqueueResult) (err error) {
	start := time.Now()
	defer func() { q.m.observe("enqueue", start, err) }()
	gone := map[int]string{} // position in ms -> the first id found pruned
	for range 2 {
		firsts, err := q.enqueueScript(ctx, ms, results, gone)
		if err != nil || len(firsts) == 0 {
			return err
		}
		// Idempotency keys whose first message left msgs: a final record
		// answers for it; without one it was pruned, and the key passes
		// to the new message.
		for i, first := range firsts {
			m, err := q.Get(ctx, first)
			switch {
			case err == nil:
				results[i] = queue.EnqueueResult{Message: m, Existed: true}
				delete(firsts, i)
			case errors.Is(err, queue.ErrNotFound):
				gone[i] = first
			default:
				return fmt.Errorf("redisq: enqueue: %w", err)
			}
		}
		if len(firsts) == 0 {
			return nil
		}
	}
	return fmt.Errorf("redisq: enqueue: idempotency keys kept changing their first message")
}

// enqueueScript runs the enqueue script for the messages of ms that have no
// result yet (gone: see the script's last argument) and returns, by
// position, the first ids it asks the caller to look for.
func (q *Queue) enqueueScript(ctx context.Context, ms []*sms.Message, results []queue.EnqueueResult,
	gone map[int]string) (map[int]string, error) {
	keys := []string{q.k.msgs(), q.k.seq(), q.k.outstanding()}
	keyIndex := map[string]int{}
	index := func(key string) int {
		if i, ok := keyIndex[key]; ok {
			return i
		}
		keys = append(keys, key)
		keyIndex[key] = len(keys) // Lua indexes from 1
		return len(keys)
	}
	args := []any{q.window.Milliseconds()}
	var sent []int              // positions in ms of the messages passed to the script
	var wakeClasses []sms.Class // of the messages ready at once: announced to every replica
	now := time.Now()
	for i, m := range ms {
		if results[i].Message != nil || results[i].Err != nil {
			continue
		}
		if err := validate(m); err != nil {
			results[i] = queue.EnqueueResult{Message: m, Err: fmt.Errorf("redisq: enqueue: %w", err)}
			continue
		}
		js, delay, err := encodeQueued(m, now)
		if err != nil {
			results[i] = queue.EnqueueResult{Message: m, Err: fmt.Errorf("redisq: enqueue %s: %w", m.ID, err)}
			continue
		}
		ik := 0
		if m.IdempotencyKey != "" {
			ik = index(q.k.idem(m.Producer, m.IdempotencyKey))
		}
		args = append(args, m.ID, js, strconv.FormatInt(delay, 10), index(q.k.ready(m.Class)), ik,
			index(q.k.fin(m.ID)), gone[i])
		if delay == 0 && !slices.Contains(wakeClasses, m.Class) {
			wakeClasses = append(wakeClasses, m.Class)
		}
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return nil, nil
	}
	reply, err := q.runEnqueue(ctx, keys, args, wakeClasses)
	if err != nil {
		return nil, fmt.Errorf("redisq: enqueue %d messages: %w", len(sent), err)
	}
	if len(reply) != len(sent) {
		return nil, fmt.Errorf("redisq: enqueue: %d replies for %d messages", len(reply), len(sent))
	}
	return readEnqueueReply(reply, sent, results)
}

// encodeQueued is m's stored record as queued, and its NotBefore as a delay
// in microseconds on the Redis clock (the conversion can only make it
// later, never earlier).
func encodeQueued(m *sms.Message, now time.Time) ([]byte, int64, error) {
	stored := *m
	stored.Status = sms.StatusQueued
	rec, err := toRecord(&stored)
	if err != nil {
		return nil, 0, err
	}
	js, err := json.Marshal(rec)
	if err != nil {
		return nil, 0, err
	}
	var delay int64
	if !m.NotBefore.IsZero() {
		delay = us(m.NotBefore.Sub(now))
	}
	return js, delay, nil
}

// readEnqueueReply fills results (at the positions sent) from the script's
// reply, one triple per message: kind (0 stored, 1 an existing message,
// 2 an existing final record, 3 look for the first id), record, id. It
// returns the ids of kind 3 by position.
func readEnqueueReply(reply []any, sent []int, results []queue.EnqueueResult) (map[int]string, error) {
	firsts := map[int]string{}
	for j, r := range reply {
		triple, ok := r.([]any)
		if !ok || len(triple) != 3 {
			return nil, fmt.Errorf("redisq: enqueue: unexpected reply %v", r)
		}
		id, _ := triple[2].(string)
		kind, _ := triple[0].(int64)
		var (
			m   *sms.Message
			err error
		)
		switch kind {
		case 3:
			firsts[sent[j]] = id
			continue
		case 2:
			s, _ := triple[1].(string)
			m, err = queue.DecodeFinal(id, s)
		default:
			m, err = decodeStored(id, triple[1])
		}
		if err != nil {
			return nil, fmt.Errorf("redisq: enqueue: %w", err)
		}
		results[sent[j]] = queue.EnqueueResult{Message: m, Existed: kind != 0}
	}
	return firsts, nil
}

func validate(m *sms.Message) error {
	switch {
	case m == nil:
		return errors.New("nil message")
	case m.ID == "":
		return errors.New("message without id")
	case !m.Class.Valid():
		return fmt.Errorf("message %s: invalid class %d", m.ID, uint8(m.Class))
	}
	return nil
}

// runEnqueue runs the enqueue script and, in the same round trip, publishes
// the wake-up of classes (none: no wake-up). Only the script's answer
// decides: a wake-up that fails is logged and left to the pollers.
func (q *Queue) runEnqueue(ctx context.Context, keys []string, args []any, classes []sms.Class) ([]any, error) {
	if q.waitN > 0 {
		return q.runEnqueueWait(ctx, keys, args, classes)
	}
	if len(classes) == 0 {
		return enqueueScript.Run(ctx, q.c, keys, args...).Slice()
	}
	var (
		run *redis.Cmd
		pub *redis.IntCmd
	)
	_, _ = q.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		run = enqueueScript.EvalSha(ctx, p, keys, args...)
		pub = q.publish(ctx, p, classes)
		return nil
	})
	if err := run.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// The script is not cached on this server yet: load it, then
		// wake on its own.
		reply, err := enqueueScript.Run(ctx, q.c, keys, args...).Slice()
		if err == nil {
			q.announce(ctx, classes)
		}
		return reply, err
	}
	q.published(pub.Err())
	return run.Slice()
}

// runEnqueueWait runs the enqueue script, the wake-up and WAIT in one
// pipeline on one connection to the account's master (WAIT counts the
// writes of its own connection): the enqueue returns once q.waitN replicas
// acknowledged it, or fails with queue.ErrNotReplicated.
func (q *Queue) runEnqueueWait(ctx context.Context, keys []string, args []any, classes []sms.Class) ([]any, error) {
	var node redis.Cmdable = q.c
	if cc, ok := q.c.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, err
		}
		node = m
	}
	var (
		run  *redis.Cmd
		pub  *redis.IntCmd
		wait *redis.Cmd
	)
	pipeline := func() {
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
			run = enqueueScript.EvalSha(ctx, p, keys, args...)
			if len(classes) > 0 {
				pub = q.publish(ctx, p, classes)
			}
			wait = p.Do(ctx, "WAIT", q.waitN, q.waitFor.Milliseconds())
			return nil
		})
	}
	pipeline()
	if err := run.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// The script did not run: load it on this node and run again.
		if err := enqueueScript.Load(ctx, node).Err(); err != nil {
			return nil, err
		}
		pipeline()
	}
	reply, err := run.Slice()
	if err != nil {
		if redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") {
			return nil, fmt.Errorf("%w: the account's slot is moving: %w", queue.ErrNotReplicated, err)
		}
		return nil, err
	}
	if pub != nil {
		q.published(pub.Err())
	}
	if n, err := wait.Int64(); err != nil || n < int64(q.waitN) {
		return nil, fmt.Errorf("%w: %d of %d replicas confirmed within %s (%v)", queue.ErrNotReplicated, n, q.waitN, q.waitFor, err)
	}
	return reply, nil
}
