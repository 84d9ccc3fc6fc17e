package redisq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/queue/redisq/luasrc"
	"smsgw/internal/sms"
)

// eventRecord is what the cb:ev HASH stores for one event: the storage
// schema, short names, times in Unix ms. The scripts write it (outbox_add)
// and edit it by these names.
type eventRecord struct {
	Message     string `json:"m"`            // message id
	Producer    string `json:"p"`            // producer name
	CallbackURL string `json:"u,omitempty"`  // the message's callback_url
	Status      string `json:"s"`            // status word (sent, failed, ...)
	Reference   string `json:"r,omitempty"`  // the producer's reference
	Class       uint8  `json:"c"`            // class code (queue.ClassCode)
	Segments    int    `json:"g,omitempty"`  // segments
	ProviderID  string `json:"pm,omitempty"` // provider message id
	ErrorCode   string `json:"ec,omitempty"` // queue.EventError*
	ErrorReason string `json:"er,omitempty"` // the message's last error
	At          int64  `json:"t"`            // status change, ms (Redis clock)
	AgeFrom     int64  `json:"ta,omitempty"` // start of its max age when not At (an operator retried it), ms
	Attempts    int    `json:"n,omitempty"`  // delivery attempts spent
	LastError   string `json:"le,omitempty"` // of the last delivery attempt
	Token       string `json:"lt,omitempty"` // claim token while claimed
	Dead        bool   `json:"d,omitempty"`
	DeadAt      int64  `json:"td,omitempty"` // ms
	// A reply's event (replies.go): kind "r", the recipient's number, our
	// number and the text; Message is the reply's id.
	Kind string `json:"k,omitempty"`
	From string `json:"fr,omitempty"`
	To   string `json:"to,omitempty"`
	Text string `json:"tx,omitempty"`
}

// recordSentScript stores a message sent outside the queue (the OTP fast
// path) as a sent message's final record, indexes its provider id for
// receipts and writes its event, in one step, as completeScript does for
// a queued message: a receipt kept early for the id (receiptScript, the
// early key) is applied to the record, and the one event reports its
// status. An id that already has a final record keeps it.
//
// KEYS[1] the final LIST of the id's creation second, KEYS[2] its blob
// (compact.go), KEYS[3] the compaction ZSET, KEYS[4..7] the outbox,
// KEYS[8] the id's early key (keys.early), KEYS[9] the message's usage HASH
// (luasrc.Usage), KEYS[10] the provider id's index HASH (with a provider id
// only). ARGV[1] id, ARGV[2] the final record
// before its times, ARGV[3] after them, ARGV[4] the id's creation time ms,
// ARGV[5] retention µs, ARGV[6] the record JSON for the event (w set: with
// callbacks), ARGV[7] "1" when the caller found no record of the id in the
// blob, with KEYS[10]: ARGV[8] the index field, ARGV[9] its value, ARGV[10]
// the index HASH's time to live ms (else empty); ARGV[11] and ARGV[12] the
// usage fields accepted and sent, ARGV[13] the units, ARGV[14] the expiry
// ms. Returns the status code stored (s, or
// the early receipt's), 0 when the id was stored already, -1 when the
// second has a blob the caller has not looked in (the script cannot read
// it).
var recordSentScript = redis.NewScript(luasrc.Prelude + luasrc.Outbox + luasrc.Usage + `
if fin_find(KEYS[1], ARGV[1]) then return 0 end
if ARGV[7] ~= '1' and redis.call('EXISTS', KEYS[2]) == 1 then return -1 end
local now = now_us()
if KEYS[10] then
  redis.call('HSET', KEYS[10], ARGV[8], ARGV[9])
  redis.call('PEXPIRE', KEYS[10], ARGV[10])
end
-- usage: accepted and sent in one step (it never was in the queue)
usage_add(KEYS[9], ARGV[11], ARGV[13], 1, ARGV[14])
usage_add(KEYS[9], ARGV[12], ARGV[13], 1, ARGV[14])
local rec = fin_times(ARGV[2], ARGV[3], ARGV[4], now, true)
local m = cjson.decode(ARGV[6])
local final = 's'
local early = redis.call('GET', KEYS[8])
if early then
  redis.call('DEL', KEYS[8])
  final = string.sub(early, 1, 1)
  local code = string.sub(early, 2)
  rec = fin_receipt(rec, final, code)
  if code ~= '' then m.e = code end
end
fin_append(KEYS[1], KEYS[3], ARGV[1], rec, ARGV[4], ARGV[5], now)
outbox_add({KEYS[4], KEYS[5], KEYS[6], KEYS[7]}, ARGV[1], m, event_words[final], event_codes[final], now)
return final
`)

// RecordSent stores m, sent outside the queue; see queue.Queue. A
// record of the id in a compacted second (a retry, hours later, of an OTP
// whose first outcome was unknown) is looked for in the blob here, and the
// script runs again knowing.
func (q *Queue) RecordSent(ctx context.Context, m *sms.Message) (_ sms.Status, err error) {
	if err := q.begin(ctx, "record sent"); err != nil {
		return "", err
	}
	sent := *m
	sent.Status, sent.Attempts = sms.StatusSent, max(m.Attempts, 1)
	head, tail, err := queue.FinalPrefix(&sent)
	if err != nil {
		return "", fmt.Errorf("redisq: record sent: %w", err)
	}
	r, err := toRecord(&sent)
	if err != nil {
		return "", fmt.Errorf("redisq: record sent %s: %w", m.ID, err)
	}
	r.To, r.Body = "", ""
	raw, err := json.Marshal(&r)
	if err != nil {
		return "", fmt.Errorf("redisq: record sent %s: %w", m.ID, err)
	}
	created, _ := sms.IDTime(m.ID)
	start := time.Now()
	defer func() { q.m.observe("record_sent", start, err) }()
	keys := append([]string{q.k.fin(m.ID), q.k.finBlob(created.Unix()), q.k.finDue()}, q.k.outbox()...)
	accepted, use := q.usageOf(m, ""), q.usageOf(m, sms.StatusSent)
	keys = append(keys, q.k.early(m.ID), use.key)
	args := []any{m.ID, head, tail, created.UnixMilli(), us(q.retention), raw, "0"}
	if m.ProviderID != "" && len(m.ProviderID) <= queue.MaxReceiptField {
		key, field, value := q.k.pidIndexEntry(m.ProviderID, created, time.Now())
		keys = append(keys, key)
		args = append(args, field, value, (q.retention + pidGeneration).Milliseconds())
	} else {
		args = append(args, "", "", "")
	}
	args = append(args, accepted.field, use.field, use.units, use.ttl)
	for range maxExtractTries {
		v, err := recordSentScript.Run(ctx, q.c, keys, args...).Result()
		if err != nil {
			return "", fmt.Errorf("redisq: record sent %s: %w", m.ID, err)
		}
		switch v := v.(type) {
		case string:
			st, ok := queue.CodeStatus(v)
			if !ok {
				return "", fmt.Errorf("redisq: record sent %s: unexpected status code %q", m.ID, v)
			}
			return st, nil
		case int64:
			if v == 0 {
				return "", nil // stored already
			}
		default:
			return "", fmt.Errorf("redisq: record sent %s: unexpected reply %v", m.ID, v)
		}
		_, blob, err := q.readFinal(ctx, created.Unix())
		if err != nil {
			return "", fmt.Errorf("redisq: record sent %s: %w", m.ID, err)
		}
		if blob != "" {
			_, found, err := blobRecord(blob, m.ID)
			if err != nil {
				return "", fmt.Errorf("redisq: record sent %s: %w", m.ID, err)
			}
			if found {
				return "", nil // stored already
			}
		}
		args[6] = "1"
	}
	return "", fmt.Errorf("redisq: record sent %s: the blob kept changing", m.ID)
}

// claimEventsScript leases due events.
// KEYS[1] events HASH, KEYS[2] due ZSET. ARGV[1] lease µs, ARGV[2] token,
// ARGV[3] max. Returns {id, record, id, record, ...}.
var claimEventsScript = redis.NewScript(luasrc.Prelude + `
local now = now_us()
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, eid in ipairs(ids) do
  local raw = redis.call('HGET', KEYS[1], eid)
  if raw then
    local e = cjson.decode(raw)
    e.lt = ARGV[2]
    raw = cjson.encode(e)
    redis.call('HSET', KEYS[1], eid, raw)
    redis.call('ZADD', KEYS[2], now + tonumber(ARGV[1]), eid)
    out[#out + 1] = eid
    out[#out + 1] = raw
  else
    redis.call('ZREM', KEYS[2], eid)
  end
end
return out
`)

// ClaimEvents leases up to max due events; see queue.Outbox.
func (q *Queue) ClaimEvents(ctx context.Context, owner string, lease time.Duration, max int) ([]*queue.LeasedEvent, error) {
	if err := q.begin(ctx, "claim events"); err != nil {
		return nil, err
	}
	if lease <= 0 || max < 1 {
		return nil, errors.New("redisq: claim events: lease and max must be positive")
	}
	token := owner + ":" + newToken()
	reply, err := claimEventsScript.Run(ctx, q.c, []string{q.k.cbEvents(), q.k.cbDue()}, us(lease), token, max).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("redisq: claim events: %w", err)
	}
	out := make([]*queue.LeasedEvent, 0, len(reply)/2)
	for i := 0; i+1 < len(reply); i += 2 {
		ev, err := decodeEvent(reply[i], reply[i+1])
		if err != nil {
			return nil, fmt.Errorf("redisq: claim events: %w", err)
		}
		out = append(out, &queue.LeasedEvent{Event: ev, Token: token})
	}
	return out, nil
}

func decodeEvent(id, raw string) (*queue.Event, error) {
	var r eventRecord
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return nil, fmt.Errorf("decode event %s: %w", id, err)
	}
	if r.Kind == replyKind {
		return replyEvent(id, &r)
	}
	class, ok := queue.CodeClass(r.Class)
	if !ok {
		return nil, fmt.Errorf("event %s: unknown class code %d", id, r.Class)
	}
	return &queue.Event{
		ID: id, MessageID: r.Message, Producer: r.Producer, CallbackURL: r.CallbackURL,
		Status: sms.Status(r.Status), Reference: r.Reference, Class: class, Segments: r.Segments,
		ProviderID: r.ProviderID, ErrorCode: r.ErrorCode, ErrorReason: r.ErrorReason, At: queue.FromMs(r.At),
		Attempts: r.Attempts, LastError: r.LastError, Dead: r.Dead, DeadAt: queue.FromMs(r.DeadAt),
	}, nil
}

// ackEventScript removes a delivered event whose claim is held.
// KEYS[1] events HASH, KEYS[2] due ZSET, KEYS[3] age ZSET. ARGV[1] id,
// ARGV[2] token. Returns 1, or 0 when the claim is not held.
var ackEventScript = redis.NewScript(`
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local e = cjson.decode(raw)
if e.lt ~= ARGV[2] or e.d then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
`)

// AckEvent removes a delivered event; see queue.Outbox.
func (q *Queue) AckEvent(ctx context.Context, le *queue.LeasedEvent) error {
	if err := q.begin(ctx, "ack event"); err != nil {
		return err
	}
	n, err := ackEventScript.Run(ctx, q.c, []string{q.k.cbEvents(), q.k.cbDue(), q.k.cbAge()}, le.Event.ID, le.Token).Int()
	if err != nil {
		return fmt.Errorf("redisq: ack event %s: %w", le.Event.ID, err)
	}
	if n == 0 {
		return fmt.Errorf("redisq: ack event %s: %w", le.Event.ID, queue.ErrLeaseLost)
	}
	return nil
}

// deadEventsKept bounds how long dead events stay listed; each death
// prunes a few older than this.
const deadEventsKept = 7 * 24 * time.Hour

// retryEventScript ends a held claim: due again after a delay, or dead.
// KEYS[1] events HASH, KEYS[2] due ZSET, KEYS[3] age ZSET, KEYS[4] dead
// ZSET. ARGV[1] id, ARGV[2] token, ARGV[3] delay µs, ARGV[4] max age µs,
// ARGV[5] last error, ARGV[6] 1 to spend an attempt, ARGV[7] how long dead
// events are kept µs. Returns 1 due again, 2 dead, 0 claim not held.
var retryEventScript = redis.NewScript(luasrc.Prelude + `
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local e = cjson.decode(raw)
if e.lt ~= ARGV[2] or e.d then return 0 end
local now = now_us()
e.lt = nil
if ARGV[6] == '1' then e.n = (e.n or 0) + 1 end
if ARGV[5] ~= '' then e.le = ARGV[5] end
local due = now + tonumber(ARGV[3])
if due > (e.ta or e.t) * 1000 + tonumber(ARGV[4]) then
  e.d = true
  e.td = math.floor(now / 1000)
  redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(e))
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZADD', KEYS[4], now, ARGV[1])
  local old = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now - tonumber(ARGV[7]), 'LIMIT', 0, 8)
  for _, id in ipairs(old) do
    redis.call('HDEL', KEYS[1], id)
    redis.call('ZREM', KEYS[4], id)
  end
  return 2
end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(e))
redis.call('ZADD', KEYS[2], due, ARGV[1])
return 1
`)

// RetryEvent ends a claim without delivery; see queue.Outbox.
func (q *Queue) RetryEvent(ctx context.Context, le *queue.LeasedEvent, o queue.EventRetry) (bool, error) {
	if err := q.begin(ctx, "retry event"); err != nil {
		return false, err
	}
	spend := 0
	if o.SpendAttempt {
		spend = 1
	}
	keys := []string{q.k.cbEvents(), q.k.cbDue(), q.k.cbAge(), q.k.cbDead()}
	n, err := retryEventScript.Run(ctx, q.c, keys, le.Event.ID, le.Token, us(o.After), us(o.MaxAge),
		cut(o.LastError, queue.MaxEventError), spend, us(deadEventsKept)).Int()
	if err != nil {
		return false, fmt.Errorf("redisq: retry event %s: %w", le.Event.ID, err)
	}
	if n == 0 {
		return false, fmt.Errorf("redisq: retry event %s: %w", le.Event.ID, queue.ErrLeaseLost)
	}
	return n == 2, nil
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// DeadEvents lists dead events; see queue.Outbox.
func (q *Queue) DeadEvents(ctx context.Context, limit int) ([]*queue.Event, error) {
	if err := q.begin(ctx, "dead events"); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, nil
	}
	ids, err := q.c.ZRange(ctx, q.k.cbDead(), 0, int64(limit-1)).Result()
	if err != nil || len(ids) == 0 {
		return nil, wrapErr("dead events", err)
	}
	vals, err := q.c.HMGet(ctx, q.k.cbEvents(), ids...).Result()
	if err != nil {
		return nil, wrapErr("dead events", err)
	}
	out := make([]*queue.Event, 0, len(ids))
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue
		}
		ev, err := decodeEvent(ids[i], s)
		if err != nil {
			return nil, wrapErr("dead events", err)
		}
		out = append(out, ev)
	}
	return out, nil
}

func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("redisq: %s: %w", op, err)
}

// retryDeadEventScript makes a dead event due now, attempts reset, its
// max age counted from now. KEYS as retryEventScript's first four; ARGV[1]
// id. Returns 1, or 0 when no dead event has that id.
var retryDeadEventScript = redis.NewScript(luasrc.Prelude + `
if not redis.call('ZSCORE', KEYS[4], ARGV[1]) then return 0 end
local raw = redis.call('HGET', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
if not raw then return 0 end
local now = now_us()
local e = cjson.decode(raw)
e.d, e.td, e.n, e.lt = nil, nil, nil, nil
e.ta = math.floor(now / 1000)
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(e))
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('ZADD', KEYS[3], now, ARGV[1])
return 1
`)

// RetryDeadEvent makes a dead event due again; see queue.Outbox.
//
// Its max age counts from the retry; its id and body stay the same.
func (q *Queue) RetryDeadEvent(ctx context.Context, id string) error {
	if err := q.begin(ctx, "retry dead event"); err != nil {
		return err
	}
	keys := []string{q.k.cbEvents(), q.k.cbDue(), q.k.cbAge(), q.k.cbDead()}
	n, err := retryDeadEventScript.Run(ctx, q.c, keys, id).Int()
	if err != nil {
		return fmt.Errorf("redisq: retry dead event: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("redisq: retry dead event: %w", queue.ErrNotFound)
	}
	return nil
}

// outboxStatsScript: KEYS[1] age ZSET, KEYS[2] dead ZSET. Returns
// {backlog, dead, µs since the oldest undelivered event, -1 if none}.
var outboxStatsScript = redis.NewScript(luasrc.Prelude + `
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local age = -1
if #head > 0 then age = now_us() - tonumber(head[2]) end
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]), fmt_us(age)}
`)

// OutboxStats reads the outbox's depth; see queue.Outbox.
func (q *Queue) OutboxStats(ctx context.Context) (queue.OutboxStats, error) {
	if err := q.begin(ctx, "outbox stats"); err != nil {
		return queue.OutboxStats{}, err
	}
	r, err := outboxStatsScript.Run(ctx, q.c, []string{q.k.cbAge(), q.k.cbDead()}).Slice()
	if err != nil || len(r) != 3 {
		return queue.OutboxStats{}, fmt.Errorf("redisq: outbox stats: %w (%v)", err, r)
	}
	backlog, _ := r[0].(int64)
	dead, _ := r[1].(int64)
	s, _ := r[2].(string)
	age, _ := strconv.ParseInt(s, 10, 64)
	return queue.OutboxStats{Backlog: backlog, Dead: dead, OldestAge: max(time.Duration(age)*time.Microsecond, 0)}, nil
}
