package redisq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/gcra"
	"smsgw/internal/queue"
	"smsgw/internal/queue/redisq/luasrc"
	"smsgw/internal/sms"
)

// maxBatch bounds one enqueue script so that Redis is never blocked long.
const maxBatch = 1000

// enqueueScript stores messages, each at most once per id and per
// (producer, idempotency key), after the admission checks the message
// carries (queue.Checks, in their order; none for a plain enqueue).
//
// KEYS[1] msgs HASH, KEYS[2] seq counter, KEYS[3] outstanding HASH,
// KEYS[4] the wake LIST (notify.go), KEYS[5..] the ready ZSETs (named
// keys.ready: "...ready:<class>"), idempotency keys, final LISTs and check
// keys the messages name.
// ARGV[1] idempotency window ms, ARGV[2] "1" when the reply should carry
// the records of the messages stored (else "0", see below); then
// argsPerMessage per message: id,
// record JSON, ready delay µs, index in KEYS of its ready ZSET, index in
// KEYS of its idempotency key (0: none), index in KEYS of its final LIST,
// the id its idempotency key may be taken from (empty: none; see below);
// then the checks: index in KEYS of the answer key (0: none), the answer,
// its TTL ms; index of the suppression HASH (0: none), the number's id;
// max outstanding (0: none); index of the ingress GCRA key (0: none), its
// interval µs, burst and cost; "1" when the message is taken by the
// enqueuing process itself (queue.Checks.TakenHere), else "0"; index of
// the keyed-request GCRA key (0: none), its interval µs and burst (it runs
// first of the checks, after the replay, through the same charge as the
// ingress GCRA); the budget arguments (luasrc.Budget, budget.go: the
// producer's budget, checked after the ingress GCRA and charged with the
// store); index in KEYS of its batch's index LIST (0: none) and how long to
// keep it, ms (batch_add, batches.go); then the usage count of a stored
// message (luasrc.Usage): index in KEYS of its usage HASH (0: none), its field,
// units and expiry ms.
// Returns one reply per message, in order, {kind, value, id, gcra}: kind 0
// stored (value: the stored record, or "" unless ARGV[2] asked for it), 1 an existing message (its record),
// 2 an existing final record, 3 its idempotency key names a first message
// no longer in msgs (nothing stored or charged: the caller looks for the
// first's final record, and enqueues again naming that id when there is
// none), 4 a stored answer (value), 5 suppressed, 6 too many outstanding
// (value: the count), 7 the ingress GCRA denied, 8 the keyed-request GCRA
// denied, 9 over the producer's budget (value: "<1 daily|2 monthly> <count>"). gcra is the ingress GCRA's answer when it ran (with 8: the keyed
// one's), else empty.
//
// The sequence counter, the producers' outstanding counts and the GCRA
// keys' TATs are read at most once and written at most once per run
// (gcra_step keeps a TAT between a batch's messages), so a batch of many
// messages costs fewer commands than as many runs, and ends with the same
// state. An ingress TAT is read through gcra_reach: one left further ahead
// than its burst by a step back of Redis's clock is lowered, and stored
// even when every message was refused (the one write a refusal can cause,
// and never without such a step).
//
// When it stored a message ready at once that its own process does not
// take, the script pushes one wake-up token naming those messages' classes
// on KEYS[4] and trims the LIST to the newest wakeTokens: a refused or
// delayed message, or one an idle lane of the enqueuing process takes,
// wakes nobody else.
var enqueueScript = redis.NewScript(luasrc.Prelude + gcra.Lua + luasrc.Budget + luasrc.Usage + luasrc.Lanes + `
local now = now_us()
local out = {}
local fins = {}
local woken, classes = {}, {}
local records = ARGV[2] == '1'
-- What a batch reads once and writes once, at its end: the sequence
-- counter, each producer's outstanding count and each ingress key's TAT.
local seq, seq0 = nil, nil
local counts, adds = {}, {}
local tats = {}
local function outstanding(p)
  if counts[p] == nil then counts[p] = tonumber(redis.call('HGET', KEYS[3], p) or '0') end
  return counts[p] + (adds[p] or 0)
end
-- charge runs the GCRA of KEYS[gk] (interval, burst, cost): granted,
-- its TAT is written at the end of the run.
local function charge(gk, interval, burst, cost)
  local t = tats[KEYS[gk]]
  if not t then
    local stored = tonumber(redis.call('GET', KEYS[gk]) or '0')
    t = {tat = gcra_reach(stored, interval, burst, now)}
    t.dirty = t.tat < stored
    tats[KEYS[gk]] = t
  end
  local d, new = gcra_step(t.tat, interval, burst, cost, now)
  if not new then return false, d end
  t.tat, t.dirty = new, true
  return true, d
end
local function check(i, p)
  local kk = tonumber(ARGV[i + 18])
  if kk > 0 then
    local ok, d = charge(kk, tonumber(ARGV[i + 19]), tonumber(ARGV[i + 20]), 1)
    if not ok then return 8, '', d end
  end
  local sk = tonumber(ARGV[i + 10])
  if sk > 0 and redis.call('HEXISTS', KEYS[sk], ARGV[i + 11]) == 1 then return 5, '', {} end
  local most = tonumber(ARGV[i + 12])
  if most > 0 then
    local n = outstanding(p)
    if n >= most then return 6, tostring(n), {} end
  end
  local gk = tonumber(ARGV[i + 13])
  local d = {}
  if gk > 0 then
    local ok
    ok, d = charge(gk, tonumber(ARGV[i + 14]), tonumber(ARGV[i + 15]), tonumber(ARGV[i + 16]))
    if not ok then return 7, '', d end
  end
  local bp, used = budget_check(i, p) -- budget.go; the ingress unit granted stays spent
  if bp ~= 0 then return 9, bp .. ' ' .. used, d end
  return 0, '', d
end
-- The batch index (queue.Batches): a message stored with a batch id
-- joins its batch's LIST (KEYS[bk]), which is kept, at the end of the run,
-- at least keep ms from now.
local batch_keep = {}
local function batch_add(bk, id, keep)
  if bk == 0 then return end
  redis.call('RPUSH', KEYS[bk], id)
  batch_keep[bk] = math.max(batch_keep[bk] or 0, tonumber(keep))
end
for i = 3, #ARGV, ` + strconv.Itoa(argsPerMessage) + ` do
  local id = ARGV[i]
  local ik = tonumber(ARGV[i + 4])
  local ak = tonumber(ARGV[i + 7])
  local reply = false
  if ak > 0 then
    local a = redis.call('GET', KEYS[ak])
    if a then reply = {4, a, id, {}} end
  end
  if not reply and ik > 0 then
    local first = redis.call('GET', KEYS[ik])
    if first then
      local existing = redis.call('HGET', KEYS[1], first)
      if existing then
        reply = {1, existing, first, {}}
      elseif first ~= ARGV[i + 6] then
        reply = {3, '', first, {}}
      end
      -- else the first message was pruned: the key passes to this one
    end
  end
  if not reply then
    -- the same id stored before (a retried enqueue) is not stored twice
    local existing = redis.call('HGET', KEYS[1], id)
    if existing then
      reply = {1, existing, id, {}}
    else
      existing = fin_index(fins, KEYS[tonumber(ARGV[i + 5])])[id]
      if existing then reply = {2, existing, id, {}} end
    end
  end
  if not reply then
    -- The record is written by encodeQueued: its first member is the
    -- producer, and it holds neither tu nor qm. It is completed as text
    -- rather than decoded and encoded again.
    local rec = ARGV[i + 1]
    local p = string.match(rec, '^{"p":"([^"\\]*)"')
    if not p then p = cjson.decode(rec).p end
    local kind, value, gcra = check(i, p)
    if kind ~= 0 then
      reply = {kind, value, id, gcra}
    else
      if ik > 0 then redis.call('SET', KEYS[ik], id, 'PX', ARGV[1]) end
      if seq then
        seq = seq + 1
      else
        seq = redis.call('INCR', KEYS[2]) -- the run's first number; the rest are added at the end
        seq0 = seq
      end
      local member = new_member(seq, id)
      local tu = fmt_us(math.floor(now / 1000))
      local js = string.sub(rec, 1, -2) .. ',"tu":' .. tu
      if not string.find(rec, '"tc":', 1, true) then js = js .. ',"tc":' .. tu end
      js = js .. ',"qm":"' .. member .. '"}'
      redis.call('HSET', KEYS[1], id, js)
      batch_add(tonumber(ARGV[i + ` + strconv.Itoa(batchArg) + `]), id, ARGV[i + ` + strconv.Itoa(batchArg+1) + `])
      local rk = tonumber(ARGV[i + 3])
      lane_add(KEYS[rk], lane_of_text(rec), now + tonumber(ARGV[i + 2]), member, now)
      if tonumber(ARGV[i + 2]) == 0 and ARGV[i + 17] == '0' and not woken[rk] then
        woken[rk] = true
        classes[#classes + 1] = string.match(KEYS[rk], 'ready:(%a+)$')
      end
      adds[p] = (adds[p] or 0) + 1
      budget_charge(i, p)
      -- usage: the message is accepted
      local uo = i + ` + strconv.Itoa(usageArg) + `
      local uk = tonumber(ARGV[uo])
      if uk > 0 then usage_add(KEYS[uk], ARGV[uo + 1], ARGV[uo + 2], 1, ARGV[uo + 3]) end
      if ak > 0 and ARGV[i + 8] ~= '' then redis.call('SET', KEYS[ak], ARGV[i + 8], 'PX', ARGV[i + 9]) end
      if records then reply = {0, js, id, gcra} else reply = {0, '', id, gcra} end
    end
  end
  out[#out + 1] = reply
end
for bk, keep in pairs(batch_keep) do
  if redis.call('PTTL', KEYS[bk]) < keep then redis.call('PEXPIRE', KEYS[bk], keep) end
end
if seq and seq > seq0 then redis.call('INCRBY', KEYS[2], seq - seq0) end
for p, n in pairs(adds) do redis.call('HINCRBY', KEYS[3], p, n) end
budget_write()
for key, t in pairs(tats) do
  if t.dirty then gcra_set(key, t.tat, now) end
end
if #classes > 0 then
  redis.call('LPUSH', KEYS[4], table.concat(classes, ','))
  redis.call('LTRIM', KEYS[4], 0, ` + strconv.Itoa(wakeTokens-1) + `)
end
return out
`)

// argsPerMessage is how many ARGV entries enqueueScript takes per message.
const argsPerMessage = usageArg + 4

// usageArg is the offset of a message's usage arguments (usageArgs) from
// its first: after the budget's and the batch's.
const usageArg = batchArg + batchArgsPerMessage

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
	cs := make([]queue.Checked, len(ms))
	for i, m := range ms {
		cs[i].Message = m
	}
	res, err := q.enqueueChecked(ctx, cs, true)
	if err != nil {
		return nil, err
	}
	out := make([]queue.EnqueueResult, len(res))
	for i := range res {
		out[i] = res[i].EnqueueResult
	}
	return out, nil
}

var _ queue.CheckedEnqueuer = (*Queue)(nil)

// EnqueueChecked runs each message's checks and stores those they admit,
// up to maxBatch messages per atomic script: one round trip admits and
// stores (queue.Checks). The Message of a message it stored is the one
// passed in, as stored (status queued), not the record read back: its
// caller has it already, and decoding it is a cost per accept.
func (q *Queue) EnqueueChecked(ctx context.Context, cs []queue.Checked) ([]queue.CheckedResult, error) {
	return q.enqueueChecked(ctx, cs, false)
}

// enqueueChecked is EnqueueChecked; readBack decodes the record of a
// stored message into its Message (EnqueueMany's callers read it).
func (q *Queue) enqueueChecked(ctx context.Context, cs []queue.Checked, readBack bool) ([]queue.CheckedResult, error) {
	if err := q.begin(ctx, "enqueue"); err != nil {
		return nil, err
	}
	results := make([]queue.CheckedResult, len(cs))
	for lo := 0; lo < len(cs); lo += maxBatch {
		hi := min(lo+maxBatch, len(cs))
		if err := q.enqueueBatch(ctx, cs[lo:hi], results[lo:hi], readBack); err != nil {
			return nil, err
		}
	}
	return results, nil
}

func (q *Queue) enqueueBatch(ctx context.Context, cs []queue.Checked, results []queue.CheckedResult, readBack bool) (err error) {
	start := time.Now()
	defer func() { q.m.observe("enqueue", start, err) }()
	if err := q.precheckOld(ctx, cs, results); err != nil {
		return err
	}
	gone := map[int]string{} // position in cs -> the first id found pruned
	for range 2 {
		firsts, err := q.enqueueScript(ctx, cs, results, gone, readBack)
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
				results[i].EnqueueResult = queue.EnqueueResult{Message: m, Existed: true}
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

// scriptCall gathers the keys and arguments of one enqueueScript run.
type scriptCall struct {
	keys     []string
	keyIndex map[string]int
	args     []any
}

// index is key's position in KEYS (from 1, as Lua counts), adding it.
func (c *scriptCall) index(key string) int {
	if i, ok := c.keyIndex[key]; ok {
		return i
	}
	c.keys = append(c.keys, key)
	c.keyIndex[key] = len(c.keys)
	return len(c.keys)
}

// checkArgs appends the check arguments of ch (zeros for none).
func (c *scriptCall) checkArgs(ch *queue.Checks) {
	ak, sk, gk, kk := 0, 0, 0, 0
	if ch.AnswerKey != "" {
		ak = c.index(ch.AnswerKey)
	}
	if ch.SuppressionKey != "" {
		sk = c.index(ch.SuppressionKey)
	}
	if ch.IngressKey != "" {
		gk = c.index(ch.IngressKey)
	}
	if ch.KeyedKey != "" {
		kk = c.index(ch.KeyedKey)
	}
	here := "0"
	if ch.TakenHere {
		here = "1"
	}
	c.args = append(c.args, ak, string(ch.Answer), max(ch.AnswerTTL.Milliseconds(), 1), sk, ch.SuppressionID,
		ch.MaxOutstanding, gk, ch.IngressInterval, ch.IngressBurst, ch.IngressCost, here,
		kk, ch.KeyedInterval, ch.KeyedBurst)
}

// checkKeys refuses check keys outside the queue's account tag: the
// script would fail with CROSSSLOT on a Cluster, and another account's
// keys are not this queue's to touch.
func (q *Queue) checkKeys(ch *queue.Checks) error {
	for _, k := range []string{ch.AnswerKey, ch.SuppressionKey, ch.IngressKey, ch.KeyedKey} {
		if k != "" && !strings.HasPrefix(k, q.acctTag) {
			return fmt.Errorf("check key outside the account's hash tag")
		}
	}
	if ch.IngressKey != "" && (ch.IngressInterval < 1 || ch.IngressBurst < 1 || ch.IngressCost < 1 || ch.IngressCost > ch.IngressBurst) {
		return fmt.Errorf("ingress check: interval %d, burst %d, cost %d", ch.IngressInterval, ch.IngressBurst, ch.IngressCost)
	}
	if ch.KeyedKey != "" && (ch.KeyedInterval < 1 || ch.KeyedBurst < 1) {
		return fmt.Errorf("keyed check: interval %d, burst %d", ch.KeyedInterval, ch.KeyedBurst)
	}
	return nil
}

// enqueueScript runs the enqueue script for the messages of cs that have no
// result yet (gone: see the script's idempotency argument) and returns, by
// position, the first ids it asks the caller to look for.
func (q *Queue) enqueueScript(ctx context.Context, cs []queue.Checked, results []queue.CheckedResult,
	gone map[int]string, readBack bool) (map[int]string, error) {
	records := "0" // without readBack a stored message's record is not sent back
	if readBack {
		records = "1"
	}
	call := &scriptCall{keys: []string{q.k.msgs(), q.k.seq(), q.k.outstanding(), q.k.wake()}, keyIndex: map[string]int{},
		args: []any{q.window.Milliseconds(), records}}
	var sent []int // positions in cs of the messages passed to the script
	now := time.Now()
	for i := range cs {
		m, r := cs[i].Message, &results[i]
		if r.Message != nil || r.Err != nil || r.Replay != nil || r.Refused != queue.NotRefused {
			continue
		}
		err := validate(m)
		if err == nil {
			err = q.checkKeys(&cs[i].Checks)
		}
		if err != nil {
			r.EnqueueResult = queue.EnqueueResult{Message: m, Err: fmt.Errorf("redisq: enqueue: %w", err)}
			continue
		}
		js, delay, err := encodeQueued(m, now)
		if err != nil {
			r.EnqueueResult = queue.EnqueueResult{Message: m, Err: fmt.Errorf("redisq: enqueue %s: %w", m.ID, err)}
			continue
		}
		ik := 0
		if m.IdempotencyKey != "" {
			ik = call.index(q.k.idem(m.Producer, m.IdempotencyKey))
		}
		call.args = append(call.args, m.ID, js, strconv.FormatInt(delay, 10), call.index(q.k.ready(m.Class)), ik,
			call.index(q.k.fin(m.ID)), gone[i])
		call.checkArgs(&cs[i].Checks)
		call.budgetArgs(q, m)
		call.batchArgs(q, m, now)
		call.usageArgs(q.usageOf(m, ""))
		sent = append(sent, i)
	}
	if len(sent) == 0 {
		return nil, nil
	}
	reply, err := q.runEnqueue(ctx, call.keys, call.args)
	if err != nil {
		if mayHaveRun(err) {
			return nil, fmt.Errorf("redisq: enqueue %d messages: %w: %w", len(sent), queue.ErrMaybeStored, err)
		}
		return nil, fmt.Errorf("redisq: enqueue %d messages: %w", len(sent), err)
	}
	if len(reply) != len(sent) {
		return nil, fmt.Errorf("redisq: enqueue: %d replies for %d messages", len(reply), len(sent))
	}
	return readEnqueueReply(reply, sent, cs, results, readBack)
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
	// The enqueue script appends tu (and tc when absent) and qm to the
	// text, on the Redis clock: the record must not hold them already.
	rec.Updated = 0
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
// reply (see enqueueScript). It returns the ids of kind 3 by position.
// Without readBack a stored message (kind 0) is the one passed in, as
// stored, and its record in the reply is not decoded.
func readEnqueueReply(reply []any, sent []int, cs []queue.Checked, results []queue.CheckedResult, readBack bool) (map[int]string, error) {
	firsts := map[int]string{}
	for j, r := range reply {
		quad, ok := r.([]any)
		if !ok || len(quad) != 4 {
			return nil, fmt.Errorf("redisq: enqueue: unexpected reply %v", r)
		}
		res := &results[sent[j]]
		id, _ := quad[2].(string)
		kind, _ := quad[0].(int64)
		value, _ := quad[1].(string)
		if err := readGCRA(quad[3], &res.Verdict); err != nil {
			return nil, err
		}
		var (
			m   *sms.Message
			err error
		)
		switch kind {
		case 3:
			firsts[sent[j]] = id
			continue
		case 4:
			res.Replay = []byte(value)
			continue
		case 5:
			res.Refused = queue.RefusedSuppressed
			continue
		case 6:
			res.Refused = queue.RefusedOutstanding
			res.Outstanding, _ = strconv.ParseInt(value, 10, 64)
			continue
		case 7:
			res.Refused = queue.RefusedIngress
			continue
		case 9: // budget.go
			res.Err = overBudget(value, cs[sent[j]].Message)
			continue
		case 8: // the decision read is the keyed GCRA's
			res.Refused, res.Ingress = queue.RefusedKeyed, false
			continue
		case 2:
			m, err = queue.DecodeFinal(id, value)
		case 0:
			if !readBack {
				stored := *cs[sent[j]].Message
				stored.Status = sms.StatusQueued
				m = &stored
				break
			}
			m, err = decodeStored(id, quad[1])
		default:
			m, err = decodeStored(id, quad[1])
		}
		if err != nil {
			return nil, fmt.Errorf("redisq: enqueue: %w", err)
		}
		res.EnqueueResult = queue.EnqueueResult{Message: m, Existed: kind != 0}
	}
	return firsts, nil
}

// readGCRA reads the ingress decision of a reply, when the GCRA ran.
func readGCRA(v any, out *queue.Verdict) error {
	raw, _ := v.([]any)
	if len(raw) == 0 {
		return nil
	}
	ns := make([]int64, len(raw))
	for i, x := range raw {
		ns[i], _ = x.(int64)
	}
	d, err := gcra.DecisionOf(ns)
	if err != nil {
		return fmt.Errorf("redisq: enqueue: %w", err)
	}
	out.Ingress, out.RetryAfter, out.ResetAfter, out.Remaining = true, d.RetryAfter, d.ResetAfter, d.Remaining
	return nil
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

// mayHaveRun reports whether a script call that failed with err may still
// run, or have run, in Redis: the request may have gone out and no answer
// came (a read timeout, the connection dropped or reset, the caller's
// deadline). A failed dial, an exhausted pool or a closed client never
// sent it; an error Redis answered means it did not run. go-redis retries
// a timed-out call on a new connection, so the last error decides: a
// later dial that fails means Redis is gone, and with it the earlier try.
func mayHaveRun(err error) bool {
	var op *net.OpError
	var rerr redis.Error
	switch {
	case err == nil, errors.As(err, &rerr),
		errors.As(err, &op) && op.Op == "dial",
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted), errors.Is(err, redis.ErrClosed):
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// runEnqueue runs the enqueue script (which also wakes an idle replica).
func (q *Queue) runEnqueue(ctx context.Context, keys []string, args []any) ([]any, error) {
	if q.waitN > 0 {
		return q.runEnqueueWait(ctx, keys, args)
	}
	return enqueueScript.Run(ctx, q.c, keys, args...).Slice()
}

// runEnqueueWait runs the enqueue script and WAIT in one pipeline on one
// connection to the account's master (WAIT counts the writes of its own
// connection): the enqueue returns once q.waitN replicas acknowledged it,
// or fails with queue.ErrNotReplicated.
func (q *Queue) runEnqueueWait(ctx context.Context, keys []string, args []any) ([]any, error) {
	var node redis.Cmdable = q.c
	if cc, ok := q.c.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return nil, err
		}
		node = m
	}
	var run, wait *redis.Cmd
	pipeline := func() {
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
			run = enqueueScript.EvalSha(ctx, p, keys, args...)
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
	if n, err := wait.Int64(); err != nil || n < int64(q.waitN) {
		return nil, fmt.Errorf("%w: %d of %d replicas confirmed within %s (%v)", queue.ErrNotReplicated, n, q.waitN, q.waitFor, err)
	}
	return reply, nil
}
