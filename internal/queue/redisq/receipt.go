package redisq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/queue/redisq/luasrc"
	"smsgw/internal/sms"
)

// receiptScript applies a delivery receipt, only forward.
//
// KEYS[1] msgs HASH, KEYS[2] the final LIST of the id, KEYS[3..6] the
// outbox (keys.outbox: an applied receipt writes its event, for a full
// record and a final record alike), KEYS[7] the id's second's blob
// (keys.finBlob), KEYS[8] the compaction ZSET (keys.finDue), KEYS[9] the
// id's early key (keys.early; only for a receipt by reference).
// ARGV[1] our id, ARGV[2] the receipt's status code (v, u or f), ARGV[3]
// its error code, ARGV[4] the id's creation time ms; to apply it to a
// compacted record: ARGV[5] the blob's element of the id, ARGV[6] the
// SHA-1 of the blob it was read from (else both empty), ARGV[7] with
// KEYS[9]: queue.EarlyReceiptWindow in ms.
// Returns {0} unknown, {6} kept in the early key (an id created within the
// window and not stored: RecordSent applies it), {7} an early receipt kept
// already, {5, blob} when the final record may be in the blob
// (the caller finds the element and runs the script again with it), or
// {result, stored value, id, form} with result 1 applied (sent → the
// receipt's status), 2 parked (queued, sending or a dead letter: kept in
// rs/re until Complete records sent, after RetryDead for a dead letter),
// 3 duplicate (final already, or a receipt parked
// already); form 'f' when the value is a final record.
var receiptScript = redis.NewScript(luasrc.Prelude + luasrc.Record + luasrc.Outbox + `
local id = ARGV[1]
local raw = redis.call('HGET', KEYS[1], id)
if not raw then
  -- done: its final record, the LIST's element at position i
  local function apply(i, item)
    local rec, at = fin_match(item, id)
    local name = string.sub(item, 1, at)
    local t = fin_split(rec)
    if fin_status(t) ~= 's' then return {3, rec, id, 'f'} end
    local now = now_us()
    rec = fin_receipt(rec, ARGV[2], ARGV[3])
    t = fin_split(rec)
    local pos = fin_pos(t)
    if t[pos.ts] == '=' then t[pos.ts] = t[pos.tu] end -- sent when it was last changed, until now
    t[pos.tu] = b36(math.floor(now / 1000) - tonumber(ARGV[4]))
    rec = table.concat(t, '\31')
    -- Version 3 keeps the send time written out, so the record keeps
    -- its length (status one letter, last change as long) and LSET
    -- rewrites it in place: one that grows an element of a full
    -- quicklist node splits the node.
    redis.call('LSET', KEYS[2], i - 1, name .. rec)
    fin_due(KEYS[8], fin_sec(ARGV[4]), now)
    outbox_add({KEYS[3], KEYS[4], KEYS[5], KEYS[6]}, id, fin_event_fields(t), event_words[ARGV[2]],
      event_codes[ARGV[2]], now)
    return {1, rec, id, 'f'}
  end
  local items = redis.call('LRANGE', KEYS[2], 0, -1)
  for i = #items, 1, -1 do
    if fin_match(items[i], id) then return apply(i, items[i]) end
  end
  -- compacted: the caller's element of the blob, back into the LIST
  if ARGV[5] and ARGV[5] ~= '' and fin_match(ARGV[5], id) then
    local n = fin_extract(KEYS[2], KEYS[7], ARGV[5], ARGV[6])
    if n then
      fin_due(KEYS[8], fin_sec(ARGV[4]), now_us()) -- the LIST is back: compact it again
      return apply(n, ARGV[5])
    end
  end
  local blob = redis.call('GET', KEYS[7])
  if blob then return {5, blob} end
  if KEYS[9] and math.floor(now_us() / 1000) - tonumber(ARGV[4]) < tonumber(ARGV[7]) then
    if redis.call('SET', KEYS[9], ARGV[2] .. ARGV[3], 'PX', ARGV[7], 'NX') then return {6} end
    return {7}
  end
  return {0}
end
local m = cjson.decode(raw)
local st = status_of(m)
if st == 's' then
  local now = now_us()
  set(m, 's', ARGV[2])
  set_time(m, 'tu', now)
  if ARGV[3] ~= '' then set(m, 'e', ARGV[3]) end
  local js = cjson.encode(m)
  redis.call('HSET', KEYS[1], id, js)
  outbox_add({KEYS[3], KEYS[4], KEYS[5], KEYS[6]}, id, m, event_words[ARGV[2]], event_codes[ARGV[2]], now)
  return {1, js, id}
end
if (st == 'q' or st == 'l' or (st == 'f' and get(m, 'd'))) and not m.rs then
  m.rs = ARGV[2]
  if ARGV[3] ~= '' then m.re = ARGV[3] end
  local js = cjson.encode(m)
  redis.call('HSET', KEYS[1], id, js)
  return {2, js, id}
end
return {3, raw, id}
`)

// pidLookupScript finds a provider id in the index (keys.pidIndex).
//
// KEYS[1] the id's key of the index before it (keys.pid; the first call
// only), then the index HASHes of the id's shard, one per generation,
// newest first. ARGV[1] the id's field, ARGV[2] 1 when KEYS[1] is the old
// key.
// Returns {1, message id} from the old key, {2, value, position in KEYS}
// from a HASH, or {0}.
var pidLookupScript = redis.NewScript(`
local from = 1
if ARGV[2] == '1' then
  local id = redis.call('GET', KEYS[1])
  if id then return {1, id} end
  from = 2
end
for i = from, #KEYS do
  local v = redis.call('HGET', KEYS[i], ARGV[1])
  if v then return {2, v, i} end
end
return {0}
`)

// pidLookupBatch bounds the index HASHes one pidLookupScript reads (a long
// retention spans many generations).
const pidLookupBatch = 200

// byProviderID is the id of the message sent with providerID, "" for none:
// the index names the second it was created in, whose final LIST holds
// its record with that provider id (a hash of the id in the index may be
// another's; the record decides). Three round trips: receipts carry our
// id as their reference with every adapter, so this is the rare path.
func (q *Queue) byProviderID(ctx context.Context, providerID string) (string, error) {
	now := time.Now()
	shard, field := pidEntry(providerID)
	newest := pidGen(now.Add(pidGeneration)) // a clock a little ahead wrote in the next
	oldest := pidGen(now.Add(-q.retention - 2*pidGeneration))
	for hi := newest; hi >= oldest; hi -= pidLookupBatch {
		var keys []string
		old := "0"
		if hi == newest {
			keys, old = append(keys, q.k.pid(providerID)), "1"
		}
		gens := make([]int64, 0, pidLookupBatch)
		for g := hi; g > hi-pidLookupBatch && g >= oldest; g-- {
			keys, gens = append(keys, q.k.pidIndex(g, shard)), append(gens, g)
		}
		reply, err := pidLookupScript.Run(ctx, q.c, keys, field, old).Slice()
		if err != nil {
			return "", err
		}
		switch kind, _ := reply[0].(int64); {
		case kind == 1 && len(reply) == 2:
			id, _ := reply[1].(string)
			return id, nil
		case kind == 2 && len(reply) == 3:
			v, _ := reply[1].(string)
			pos, _ := reply[2].(int64)
			rel, err := strconv.ParseInt(v, 10, 64)
			i := int(pos) - 1 - (len(keys) - len(gens))
			if err != nil || i < 0 || i >= len(gens) {
				return "", fmt.Errorf("provider-id index: unexpected reply %v", reply)
			}
			return q.findSent(ctx, gens[i]*int64(pidGeneration/time.Second)+rel, providerID)
		case kind != 0:
			return "", fmt.Errorf("provider-id index: unexpected reply %v", reply)
		}
	}
	return "", nil
}

// findSent is the id of the message created in Unix second sec whose final
// record has providerID, "" for none: its LIST's elements, newest first,
// then its blob's records.
func (q *Queue) findSent(ctx context.Context, sec int64, providerID string) (string, error) {
	els, blob, err := q.readFinal(ctx, sec)
	if err != nil {
		return "", err
	}
	match := func(short, rec string) (string, bool) {
		if len(rec) == 0 || rec[0] != '3' {
			return "", false // not version 3: the index has only those
		}
		id, ok := queue.FinalID(sec, short)
		if !ok {
			return "", false
		}
		m, err := queue.DecodeFinal(id, rec)
		return id, err == nil && m.ProviderID == providerID
	}
	for i := len(els) - 1; i >= 0; i-- {
		if len(els[i]) < 13 {
			continue
		}
		if id, ok := match(els[i][:12], els[i][12:]); ok {
			return id, nil
		}
	}
	if blob == "" {
		return "", nil
	}
	entries, err := decodeBlob(blob)
	if err != nil {
		return "", err
	}
	for i := len(entries) - 1; i >= 0; i-- {
		if id, ok := match(entries[i].short, entries[i].rec); ok {
			return id, nil
		}
	}
	return "", nil
}

var receiptResults = map[int64]queue.ReceiptResult{1: queue.ReceiptApplied, 2: queue.ReceiptParked, 3: queue.ReceiptDuplicate}

// ApplyReceipt applies a provider's delivery receipt; see queue.Queue. A
// receipt without a reference first reads the provider id's index.
func (q *Queue) ApplyReceipt(ctx context.Context, r queue.Receipt) (_ queue.ReceiptOutcome, err error) {
	if err := q.begin(ctx, "receipt"); err != nil {
		return queue.ReceiptOutcome{}, err
	}
	if err := queue.CheckReceipt(r); err != nil {
		return queue.ReceiptOutcome{}, err
	}
	status, err := queue.StatusCode(r.Status)
	if err != nil {
		return queue.ReceiptOutcome{}, fmt.Errorf("redisq: receipt: %w", err)
	}
	start := time.Now()
	defer func() { q.m.observe("receipt", start, err) }()
	id := r.Reference
	if id == "" {
		if id, err = q.byProviderID(ctx, r.ProviderID); err != nil {
			return queue.ReceiptOutcome{}, fmt.Errorf("redisq: receipt: %w", err)
		}
	}
	created, ok := sms.IDTime(id)
	if !ok {
		return queue.ReceiptOutcome{Result: queue.ReceiptUnknown}, nil
	}
	keys := append([]string{q.k.msgs(), q.k.fin(id)}, q.k.outbox()...)
	keys = append(keys, q.k.finBlob(created.Unix()), q.k.finDue())
	early := []any{}
	if r.Reference != "" {
		keys = append(keys, q.k.early(id))
		early = append(early, queue.EarlyReceiptWindow.Milliseconds())
	}
	elem, sha := "", ""
	var reply []any
	for try := 0; ; try++ {
		args := append([]any{id, status, r.ErrorCode, created.UnixMilli(), elem, sha}, early...)
		reply, err = receiptScript.Run(ctx, q.c, keys, args...).Slice()
		if err != nil {
			return queue.ReceiptOutcome{}, fmt.Errorf("redisq: receipt: %w", err)
		}
		if code, _ := reply[0].(int64); code != 5 || len(reply) != 2 {
			break
		}
		// Compacted: the blob's element, given back to the script, which
		// puts it into the LIST before it applies the receipt (unless the
		// blob changed meanwhile: then it answers with the new one).
		blob, _ := reply[1].(string)
		rec, found, err := blobRecord(blob, id)
		switch {
		case err != nil:
			return queue.ReceiptOutcome{}, fmt.Errorf("redisq: receipt: %w", err)
		case !found:
			return queue.ReceiptOutcome{Result: queue.ReceiptUnknown}, nil
		case try == maxExtractTries:
			return queue.ReceiptOutcome{}, fmt.Errorf("redisq: receipt: the compacted records of %s kept changing", id)
		}
		m, err := queue.DecodeFinal(id, rec)
		if err != nil {
			return queue.ReceiptOutcome{}, fmt.Errorf("redisq: receipt: %w", err)
		}
		if m.Status != sms.StatusSent {
			return queue.ReceiptOutcome{Result: queue.ReceiptDuplicate, Message: m}, nil // nothing to write
		}
		elem, sha = listElement(id, rec), blobSHA(blob)
	}
	code, _ := reply[0].(int64)
	switch code {
	case 0:
		return queue.ReceiptOutcome{Result: queue.ReceiptUnknown}, nil
	case 6:
		return queue.ReceiptOutcome{Result: queue.ReceiptParked}, nil
	case 7:
		return queue.ReceiptOutcome{Result: queue.ReceiptDuplicate}, nil
	}
	res, ok := receiptResults[code]
	if !ok || len(reply) < 3 {
		return queue.ReceiptOutcome{}, fmt.Errorf("redisq: receipt: unexpected reply %v", reply)
	}
	var m *sms.Message
	if len(reply) == 4 {
		s, _ := reply[1].(string)
		m, err = queue.DecodeFinal(id, s)
	} else {
		m, err = decodeStored(id, reply[1])
	}
	if err != nil {
		return queue.ReceiptOutcome{}, fmt.Errorf("redisq: receipt: %w", err)
	}
	return queue.ReceiptOutcome{Result: res, Message: m}, nil
}

// cancelScript cancels a queued message, atomically against Take (both
// are scripts: one runs first). The caller read the message's record and
// checked its producer and status on it; the script cancels only while the
// record is still that one, so a take, a receipt or an edit in between
// makes the caller read it again. Like Complete, the message leaves msgs
// for its final record (queue.FinalPrefix: no body, no full number) in the
// LIST of its creation second.
//
// KEYS[1] msgs HASH, KEYS[2] outstanding HASH, KEYS[3..5] the ready ZSETs
// in class-code order, KEYS[6..9] the outbox (keys.outbox: the canceled
// event), KEYS[10] the final LIST, KEYS[11] the compaction ZSET, KEYS[12]
// the budget HASH (the units go back: budget.go), KEYS[13] the message's
// usage HASH (luasrc.Usage).
// ARGV[1] id, ARGV[2] producer, ARGV[3] the record read, ARGV[4] the final
// record's head, ARGV[5] the id's creation time ms, ARGV[6] retention µs,
// ARGV[7] the final record's tail, ARGV[8..10] the usage field, units and
// expiry ms.
// Returns {0} gone, {2} changed since it was read, {1, final record}
// canceled.
var cancelScript = redis.NewScript(luasrc.Prelude + luasrc.Record + luasrc.Outbox + luasrc.BudgetRefund + luasrc.Usage + luasrc.Lanes + `
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return {0} end
if raw ~= ARGV[3] then return {2} end
local m = cjson.decode(raw)
local now = now_us()
-- a record written before members were kept (no qm) leaves its member for
-- Take to drop
if m.qm and m.c then lane_rem(KEYS[3 + m.c], lane_of(m), m.qm, now) end
redis.call('HDEL', KEYS[1], ARGV[1])
local rec = fin_times(ARGV[4], ARGV[7], ARGV[5], now, false)
fin_append(KEYS[10], KEYS[11], ARGV[1], rec, ARGV[5], ARGV[6], now)
outbox_add({KEYS[6], KEYS[7], KEYS[8], KEYS[9]}, ARGV[1], m, 'canceled', '', now)
usage_add(KEYS[13], ARGV[8], ARGV[9], 1, ARGV[10])
if redis.call('HINCRBY', KEYS[2], ARGV[2], -1) <= 0 then
  redis.call('HDEL', KEYS[2], ARGV[2])
end
budget_refund(KEYS[12], m) -- budget.go
return {1, rec}
`)

// cancelTries bounds how often Cancel reads a record that changed under
// it (a receipt parked on it, a requeue) before giving up.
const cancelTries = 5

// Cancel cancels producer's queued message id; see queue.Queue. It reads
// the record, decides on it, and cancels only if the record is still the
// one read (cancelScript).
func (q *Queue) Cancel(ctx context.Context, id, producer string) (_ *sms.Message, err error) {
	if err := q.begin(ctx, "cancel"); err != nil {
		return nil, err
	}
	start := time.Now()
	defer func() { q.m.observe("cancel", start, err) }()
	created, ok := sms.IDTime(id)
	if !ok {
		return nil, fmt.Errorf("redisq: cancel %q: %w", id, queue.ErrNotFound)
	}
	keys := []string{q.k.msgs(), q.k.outstanding()}
	for _, c := range queue.RecordClasses() {
		keys = append(keys, q.k.ready(c))
	}
	keys = append(keys, q.k.outbox()...)
	keys = append(keys, q.k.fin(id), q.k.finDue(), q.k.budget())
	for range cancelTries {
		raw, err := q.c.HGet(ctx, q.k.msgs(), id).Result()
		if errors.Is(err, redis.Nil) {
			return q.cancelDone(ctx, id, producer)
		}
		if err != nil {
			return nil, fmt.Errorf("redisq: cancel %s: %w", id, err)
		}
		m, parked, err := decodeParked(id, raw)
		if err != nil {
			return nil, fmt.Errorf("redisq: cancel %s: %w", id, err)
		}
		if m.Producer != producer {
			return nil, fmt.Errorf("redisq: cancel %s: %w", id, queue.ErrNotFound)
		}
		if m.Status != sms.StatusQueued {
			return m, fmt.Errorf("redisq: cancel %s: %s: %w", id, m.Status, queue.ErrNotCancelable)
		}
		if parked != "" {
			// a receipt came: the provider has it, whatever the queue says
			m.Status = parked
			return m, fmt.Errorf("redisq: cancel %s: a receipt came: %w", id, queue.ErrNotCancelable)
		}
		final := *m
		final.Status = sms.StatusCanceled
		head, tail, err := queue.FinalPrefix(&final)
		if err != nil {
			return nil, fmt.Errorf("redisq: cancel: %w", err)
		}
		use := q.usageOf(m, sms.StatusCanceled)
		reply, err := cancelScript.Run(ctx, q.c, append(keys, use.key), id, producer, raw, head, created.UnixMilli(),
			us(q.retention), tail, use.field, use.units, use.ttl).Slice()
		if err != nil {
			return nil, fmt.Errorf("redisq: cancel %s: %w", id, err)
		}
		switch code, _ := reply[0].(int64); {
		case code == 0:
			return q.cancelDone(ctx, id, producer)
		case code == 2:
			continue // changed since read: decide again
		case code != 1 || len(reply) != 2:
			return nil, fmt.Errorf("redisq: cancel %s: unexpected reply %v", id, reply)
		}
		rec, _ := reply[1].(string)
		out, err := queue.DecodeFinal(id, rec)
		if err != nil {
			return nil, fmt.Errorf("redisq: cancel %s: %w", id, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("redisq: cancel %s: the message kept changing", id)
}

// cancelDone answers a cancel of a message no longer in msgs: its final
// record, if it is this producer's, is not cancelable; else it is unknown.
func (q *Queue) cancelDone(ctx context.Context, id, producer string) (*sms.Message, error) {
	if m, err := q.Get(ctx, id); err == nil && m.Producer == producer {
		return m, fmt.Errorf("redisq: cancel %s: %s: %w", id, m.Status, queue.ErrNotCancelable)
	}
	return nil, fmt.Errorf("redisq: cancel %s: %w", id, queue.ErrNotFound)
}
