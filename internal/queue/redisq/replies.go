package redisq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/queue/redisq/luasrc"
)

// Replies (queue.Routes). A route is a STRING per pair, the producer's
// name, expiring Retention after the pair's last send; a reply is an event
// of the outbox written by addReplyScript with the memory of its id.

// route is the STRING of one (sender, recipient) pair's route key: the
// producer that sent last (queue.Routes). It expires Retention after that
// send, so the routes are bounded by the sends of one retention.
func (k keys) route(key string) string { return k.tag + "rt:" + key }

// replySeen is the STRING that remembers reply id for queue.ReplyMemory.
func (k keys) replySeen(id string) string { return k.tag + "rcv:" + id }

// RememberRoute implements queue.Routes.
func (q *Queue) RememberRoute(ctx context.Context, key, producer string) error {
	if err := q.begin(ctx, "remember route"); err != nil {
		return err
	}
	if err := queue.CheckRouteKey(key); err != nil || producer == "" {
		return fmt.Errorf("redisq: remember route: %w", queue.ErrReplyInvalid)
	}
	return wrapErr("remember route", q.c.Set(ctx, q.k.route(key), producer, q.retention).Err())
}

// Route implements queue.Routes: one MGET.
func (q *Queue) Route(ctx context.Context, keys []string) (string, int, error) {
	if err := q.begin(ctx, "route"); err != nil {
		return "", -1, err
	}
	if len(keys) == 0 {
		return "", -1, nil
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		if err := queue.CheckRouteKey(k); err != nil {
			return "", -1, fmt.Errorf("redisq: route: %w", err)
		}
		names[i] = q.k.route(k)
	}
	vals, err := q.c.MGet(ctx, names...).Result()
	if err != nil {
		return "", -1, wrapErr("route", err)
	}
	for i, v := range vals {
		if s, ok := v.(string); ok && s != "" {
			return s, i, nil
		}
	}
	return "", -1, nil
}

// addReplyScript writes a reply's event unless its id is remembered.
// KEYS[1] the id's memory (keys.replySeen), KEYS[2..4] the outbox's events
// HASH, due and age ZSETs. ARGV[1] event id, ARGV[2] the event record
// without its max-age start, ARGV[3] the memory ms. Returns 1 written, 0
// remembered.
var addReplyScript = redis.NewScript(luasrc.Prelude + `
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[3]) then return 0 end
local now = now_us()
local e = cjson.decode(ARGV[2])
e.ta = math.floor(now / 1000)
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(e))
redis.call('ZADD', KEYS[3], now, ARGV[1])
redis.call('ZADD', KEYS[4], now, ARGV[1])
return 1
`)

// AddReply implements queue.Routes.
func (q *Queue) AddReply(ctx context.Context, producer string, r queue.Reply) (bool, error) {
	if err := q.begin(ctx, "add reply"); err != nil {
		return false, err
	}
	if err := queue.CheckReply(producer, r); err != nil {
		return false, fmt.Errorf("redisq: add reply: %w", err)
	}
	raw, err := json.Marshal(replyRecord(producer, r))
	if err != nil {
		return false, fmt.Errorf("redisq: add reply: %w", err)
	}
	keys := []string{q.k.replySeen(r.ID), q.k.cbEvents(), q.k.cbDue(), q.k.cbAge()}
	n, err := addReplyScript.Run(ctx, q.c, keys, queue.ReplyEventID(r.ID), raw, queue.ReplyMemory.Milliseconds()).Int()
	if err != nil {
		return false, wrapErr("add reply", err)
	}
	return n == 1, nil
}

// replyKind is eventRecord.Kind of a reply's event.
const replyKind = "r"

// replyRecord is r's event as stored.
func replyRecord(producer string, r queue.Reply) eventRecord {
	return eventRecord{Kind: replyKind, Message: r.ID, Producer: producer, Status: string(queue.StatusReceived),
		From: r.From, To: r.To, Text: r.Text, At: r.At.UnixMilli()}
}

// replyEvent is the event of a stored reply record.
func replyEvent(id string, r *eventRecord) (*queue.Event, error) {
	if r.From == "" {
		return nil, errors.New("reply event " + id + " without its sender")
	}
	return &queue.Event{
		ID: id, MessageID: r.Message, Producer: r.Producer, Status: queue.StatusReceived, At: queue.FromMs(r.At),
		Reply:    &queue.Reply{ID: r.Message, From: r.From, To: r.To, Text: r.Text, At: queue.FromMs(r.At)},
		Attempts: r.Attempts, LastError: r.LastError, Dead: r.Dead, DeadAt: queue.FromMs(r.DeadAt),
	}, nil
}
