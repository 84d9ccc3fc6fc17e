package redisq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/queue/redisq/luasrc"
	"smsgw/internal/sms"
)

// takeScript leases the first ready messages of the first classes that
// have them: at most ARGV[4], while the units taken (max(segments, 1) each)
// are fewer than ARGV[5]. With a suppression list (queue.Suppression) it
// also leases, on the way and without counting them, the messages whose
// numbers are on the list, and says so: the caller ends them with the
// completion script (endListed) and never hands them out.
//
// KEYS[1..n] ready ZSETs in priority order, KEYS[n+1..2n] the lease ZSETs of
// the same classes, KEYS[2n+1] msgs HASH, KEYS[2n+2] leases HASH, and with
// ARGV[6] not "0", KEYS[2n+3] the suppression list's HASH (ids as fields).
// ARGV[1] lease µs, ARGV[2] token, ARGV[3] owner, ARGV[4] the most messages,
// ARGV[5] the units, ARGV[6] the messages checked against the list: "0"
// none, "1" all but otp, "2" all; ARGV[7] the most listed messages to lease
// (queue.MaxSuppressedPerTake). Each message's token is ARGV[2] followed by
// its place in the reply (1, 2, ...).
// Returns {taken, wait, more, then for each message leased: its stored
// value (status sending), id, and 1 when its number is listed (else 0)}:
// taken counts those not listed; wait, when none was taken, is the µs until
// the earliest scheduled message of these classes is due (-1 if none); more
// is 1 when the script stopped at ARGV[7] listed messages (more may be
// ready).
var takeScript = redis.NewScript(luasrc.Prelude + luasrc.Record + luasrc.Lanes + `
local n = math.floor((#KEYS - 2) / 2)
local msgs, leases = KEYS[2 * n + 1], KEYS[2 * n + 2]
local most, units = tonumber(ARGV[4]), tonumber(ARGV[5])
local check, list, most_listed = ARGV[6], KEYS[2 * n + 3], tonumber(ARGV[7])
local now = now_us()
local wait = -1
local out, taken, used, listed = {0, -1, 0}, 0, 0, 0
-- A message is ended rather than handed out when the list covers its
-- class, it carries its number's id (records only: a legacy message has
-- none), no receipt is parked on it (the provider has it already), and
-- the id is on the list.
local function suppressed(m)
  if check == '0' or not m.s or type(m.ni) ~= 'string' or m.rs then return false end
  if check == '1' and m.c == 0 then return false end
  return redis.call('HEXISTS', list, m.ni) == 1
end
for i = 1, n do
  while taken < most and used < units do
    if check ~= '0' and listed >= most_listed then
      out[3] = 1
      break
    end
    local lk, tag, member, score = next_due(KEYS[i], now)
    if not lk then break end
    local id = id_of(member)
    redis.call('ZREM', lk, member)
    lane_rescore(KEYS[i], tag, now)
    local raw = redis.call('HGET', msgs, id)
    -- an entry without its message (never written so) is dropped, not handed out
    local m = raw and cjson.decode(raw)
    -- a member left behind by Cancel of a record without its member is
    -- dropped too: only queued messages are handed out
    if m and status_of(m) == 'q' then
      local ends = suppressed(m)
      set(m, 's', 'l')
      set_time(m, 'tu', now)
      local js = cjson.encode(m)
      redis.call('HSET', msgs, id, js)
      redis.call('ZADD', KEYS[n + i], now + tonumber(ARGV[1]), id)
      local token = ARGV[2] .. ((#out - 3) / 3 + 1)
      redis.call('HSET', leases, id, cjson.encode({t = token, o = ARGV[3], m = member, s = score}))
      out[#out + 1] = js
      out[#out + 1] = id
      if ends then
        out[#out + 1] = 1
        listed = listed + 1
      else
        out[#out + 1] = 0
        taken = taken + 1
        used = used + math.max(tonumber(get(m, 'g')) or 1, 1)
      end
    end
  end
  if taken > 0 or out[3] == 1 then break end
  local w = next_wait(KEYS[i], now)
  if w and (wait < 0 or w < wait) then wait = w end
end
out[1], out[2] = taken, wait
return out
`)

// Take leases the next ready message; see queue.Queue.
func (q *Queue) Take(ctx context.Context, opt queue.TakeOptions) (*queue.Leased, time.Duration, error) {
	ls, wait, err := q.take(ctx, "take", opt, 1, 1)
	if err != nil {
		return nil, wait, err
	}
	return ls[0], 0, nil
}

// TakeMore leases up to most more messages in one script; see queue.Queue.
func (q *Queue) TakeMore(ctx context.Context, opt queue.TakeOptions, most, units int) ([]*queue.Leased, error) {
	if most <= 0 || units <= 0 {
		return nil, nil
	}
	ls, _, err := q.take(ctx, "take more", opt, most, units)
	if errors.Is(err, queue.ErrEmpty) {
		return nil, nil
	}
	return ls, err
}

// take runs the take script until it leased a message to hand out, found
// none, or failed. The messages it leased because their numbers are on
// opt.Suppression's list are ended (endListed) before it returns; a run
// that stopped at queue.MaxSuppressedPerTake of them and took nothing is
// followed by another.
func (q *Queue) take(ctx context.Context, op string, opt queue.TakeOptions, most, units int) ([]*queue.Leased, time.Duration, error) {
	if err := q.begin(ctx, op); err != nil {
		return nil, 0, err
	}
	if opt.Lease <= 0 {
		return nil, 0, fmt.Errorf("redisq: %s: lease must be positive", op)
	}
	classes, err := checkClasses(opt.Classes)
	if err != nil {
		return nil, 0, fmt.Errorf("redisq: %s: %w", op, err)
	}
	keys := make([]string, 0, 2*len(classes)+3)
	for _, c := range classes {
		keys = append(keys, q.k.ready(c))
	}
	for _, c := range classes {
		keys = append(keys, q.k.lease(c))
	}
	keys = append(keys, q.k.msgs(), q.k.leases())
	check := "0"
	if s := opt.Suppression; s != nil && s.Key != "" {
		if !strings.HasPrefix(s.Key, q.acctTag) {
			return nil, 0, fmt.Errorf("redisq: %s: the suppression list's key is outside the account's hash tag", op)
		}
		check = "1"
		if s.OTP {
			check = "2"
		}
		keys = append(keys, s.Key)
	}
	for {
		run, err := q.takeOnce(ctx, op, keys, opt, most, units, check)
		if err != nil {
			return nil, 0, err
		}
		back := 0
		if len(run.listed) > 0 {
			back = q.endListed(ctx, opt.Suppression, run.listed)
		}
		switch {
		case len(run.taken) > 0:
			return run.taken, 0, nil
		case run.more, back > 0:
			// more may be ready, or one went back to its place with the
			// receipt that stopped its end: the next run hands it out.
			continue
		case run.wait < 0:
			return nil, 0, queue.ErrEmpty
		}
		// Due by now on the Redis clock: report the smallest wait, not 0,
		// which means "nothing scheduled".
		return nil, max(time.Duration(run.wait)*time.Microsecond, time.Microsecond), queue.ErrEmpty
	}
}

// takeRun is what one run of the take script leased.
type takeRun struct {
	taken  []*queue.Leased // to hand out
	listed []*queue.Leased // their numbers are on the suppression list: to end
	wait   int64           // µs until the next scheduled message (-1: none), when none was taken
	more   bool            // stopped at queue.MaxSuppressedPerTake listed messages
}

// takeOnce runs the take script once (one round trip).
func (q *Queue) takeOnce(ctx context.Context, op string, keys []string, opt queue.TakeOptions, most, units int,
	check string) (_ takeRun, err error) {
	start := time.Now()
	defer func() { q.m.observe("take", start, err) }()
	token := newToken()
	reply, err := takeScript.Run(ctx, q.c, keys, us(opt.Lease), token, opt.Owner, most, units, check,
		queue.MaxSuppressedPerTake).Slice()
	if err != nil {
		return takeRun{}, fmt.Errorf("redisq: %s: %w", op, err)
	}
	if len(reply) < 3 || (len(reply)-3)%3 != 0 {
		return takeRun{}, fmt.Errorf("redisq: %s: unexpected reply %v", op, reply)
	}
	run := takeRun{}
	run.wait, _ = reply[1].(int64)
	more, _ := reply[2].(int64)
	run.more = more == 1
	for i, k := 3, 1; i < len(reply); i, k = i+3, k+1 {
		id, _ := reply[i+1].(string)
		m, parked, err := decodeParked(id, reply[i])
		if err != nil {
			return takeRun{}, fmt.Errorf("redisq: %s: %w", op, err)
		}
		l := &queue.Leased{Message: m, Token: token + strconv.Itoa(k), Receipt: parked}
		if listed, _ := reply[i+2].(int64); listed == 1 {
			run.listed = append(run.listed, l)
		} else {
			run.taken = append(run.taken, l)
		}
	}
	return run, nil
}

// endListed ends the messages a take leased because their numbers are on
// the suppression list: each with the completion script, as Complete with
// suppressed ends a lease (its final record, its event, out of
// Outstanding), with the list's reason and event code and no attempt
// spent, all in one pipeline (one round trip, taken only by a take that
// found any). Ended hears of each that ended. One whose end fails keeps
// its lease until it expires; Recover then puts it back in its place, and
// a later take ends it (or sends it, if its number has left the list).
//
// A receipt may be parked on a message between the take script and its
// completion (an earlier attempt's outcome was unknown, and the provider
// had it): the completion then changes nothing, and the message goes back
// to its place (Requeue with KeepPlace), to be handed out with its
// receipt as the take would have done had the receipt come a moment
// earlier, never ended suppressed with the receipt dropped. It returns
// how many went back so.
func (q *Queue) endListed(ctx context.Context, s *queue.Suppression, ls []*queue.Leased) (back int) {
	start := time.Now()
	var err error
	defer func() { q.m.observe("complete", start, err) }()
	calls := make([]completion, len(ls))
	for i, l := range ls {
		o := queue.Outcome{Status: sms.StatusSuppressed, Reason: queue.ListedReason, Attempts: l.Message.Attempts}
		if calls[i], err = q.completion(l, o, queue.EventErrorSuppressed); err != nil {
			break
		}
	}
	var cmds []*redis.Cmd
	if err == nil {
		cmds = make([]*redis.Cmd, len(ls))
		_, _ = q.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, c := range calls {
				cmds[i] = completeScript.EvalSha(ctx, p, c.keys, c.args...)
			}
			return nil
		})
	}
	failed := 0
	for i, cmd := range cmds {
		if e := cmd.Err(); e != nil && redis.HasErrorPrefix(e, "NOSCRIPT") {
			// Redis does not hold the script yet (a fresh or flushed
			// server): this run loads it.
			cmd = completeScript.Run(ctx, q.c, calls[i].keys, calls[i].args...)
		}
		if n, e := cmd.Int64(); e == nil && n == 2 {
			if e := q.Requeue(ctx, ls[i], queue.RequeueOptions{KeepPlace: true}); e != nil {
				failed++
				err = e
				continue
			}
			back++
			continue
		}
		if e := q.leaseResult("complete", ls[i], cmd); e != nil {
			failed++
			err = e
			continue
		}
		if s != nil && s.Ended != nil {
			m := *ls[i].Message
			m.Status, m.LastError = sms.StatusSuppressed, queue.ListedReason
			s.Ended(&m)
		}
	}
	if cmds == nil {
		failed = len(ls)
	}
	if failed > 0 {
		q.log.Warn("messages taken while their numbers are on the suppression list were not ended; "+
			"their leases expire and a later take ends them", "count", failed, "err", err)
	}
	return back
}

// extendScript moves a held lease's expiry to now + ARGV[3].
//
// KEYS[1] lease ZSET of the message's class, KEYS[2] leases HASH.
// ARGV[1] id, ARGV[2] token, ARGV[3] lease µs.
// Returns 1, 0 when the lease is not held, -1 when it is not in KEYS[1].
var extendScript = redis.NewScript(luasrc.Prelude + luasrc.CheckLease + `
redis.call('ZADD', KEYS[1], now_us() + tonumber(ARGV[3]), ARGV[1])
return 1
`)

// Extend moves the lease's expiry to now+lease (heartbeat).
func (q *Queue) Extend(ctx context.Context, l *queue.Leased, lease time.Duration) (err error) {
	if err := q.beginLease(ctx, "extend", l); err != nil {
		return err
	}
	if lease <= 0 {
		return errors.New("redisq: extend: lease must be positive")
	}
	start := time.Now()
	defer func() { q.m.observe("extend", start, err) }()
	keys := []string{q.k.lease(l.Message.Class), q.k.leases()}
	return q.leaseResult("extend", l, extendScript.Run(ctx, q.c, keys, l.Message.ID, l.Token, us(lease)))
}

// completeScript ends a held lease with a done status: the message leaves
// msgs, and its final record (queue.FinalPrefix, with the two times on the
// Redis clock) joins the LIST of its creation second, which expires
// Retention after this completion. A receipt parked on the message (rs, re:
// it arrived before the send was recorded) turns sent into the receipt's
// status in the same step, and a sent message's provider id indexes it for
// receipts without a reference (keys.pidIndex). It prunes what Retention has passed and
// has no expiry of its own: terminal messages an earlier release kept in
// msgs (indexed by done) and dead letters.
//
// KEYS[1] lease ZSET of the class, KEYS[2] leases HASH, KEYS[3] msgs HASH,
// KEYS[4] done ZSET, KEYS[5] outstanding HASH, KEYS[6] the final LIST,
// KEYS[7..9] the dead ZSETs, KEYS[10..13] the outbox (keys.outbox): the
// message's event is written here, KEYS[14] the compaction ZSET
// (keys.finDue: the final LIST's second is due for compaction once quiet),
// KEYS[15] the provider id's index HASH (sent with a provider id only),
// then the message's usage HASH (luasrc.Usage, next to last), then (last) the
// budget HASH (budget.go: an expired or suppressed message gives its
// units back).
// ARGV[1] id, ARGV[2] token, ARGV[3] status code (s, f, x or p), ARGV[4] the
// final record before its times, ARGV[5] the id's creation time ms,
// ARGV[6] retention µs, ARGV[7] how many old messages to prune at most,
// ARGV[8] provider id, ARGV[9] reason (both for the event), ARGV[10] the
// final record after its times, ARGV[11] the event's error code (empty:
// the status's own, event_codes; "suppressed", queue.EventErrorSuppressed,
// only from endListed), with KEYS[15]: ARGV[12] the index field,
// ARGV[13] its value, ARGV[14] the index HASH's time to live ms (else
// empty); ARGV[15] the usage field, ARGV[16] its units, ARGV[17] its
// expiry ms.
// Returns 1, 0 when the lease is not held, -1 when it is not in KEYS[1],
// and 2, changing nothing, when endListed's end (ARGV[11] "suppressed")
// finds a receipt parked on the message: it came after the take script
// leased the message, and the provider has it (endListed puts it back).
var completeScript = redis.NewScript(luasrc.Prelude + luasrc.Record + luasrc.Outbox + luasrc.CheckLease + luasrc.BudgetRefund + luasrc.Usage + `
local now = now_us()
local m = cjson.decode(redis.call('HGET', KEYS[3], ARGV[1]))
if ARGV[11] == 'suppressed' and m.rs then return 2 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
local rec = fin_times(ARGV[4], ARGV[10], ARGV[5], now, ARGV[3] == 's')
if ARGV[3] == 's' then
  if m.rs then rec = fin_receipt(rec, m.rs, m.re) end
  if ARGV[12] ~= '' then
    redis.call('HSET', KEYS[15], ARGV[12], ARGV[13])
    redis.call('PEXPIRE', KEYS[15], ARGV[14])
  end
end
fin_append(KEYS[6], KEYS[14], ARGV[1], rec, ARGV[5], ARGV[6], now)
-- The event reports the status stored: a receipt parked before the send
-- was recorded makes it delivered or undelivered at once. m (the full
-- record, read before it left msgs) gives the event its callback fields.
local final = ARGV[3]
set(m, 'pm', ARGV[8])
set(m, 'e', ARGV[9])
if final == 's' and m.rs then
  final = m.rs
  if m.re then set(m, 'e', m.re) end
end
local code = event_codes[final]
if ARGV[11] ~= '' then code = ARGV[11] end
outbox_add({KEYS[10], KEYS[11], KEYS[12], KEYS[13]}, ARGV[1], m, event_words[final], code, now)
-- usage: how the queue ended it (ARGV[3]), whatever a parked receipt says
usage_add(KEYS[#KEYS - 1], ARGV[15], ARGV[16], 1, ARGV[17])
local producer = get(m, 'p')
if redis.call('HINCRBY', KEYS[5], producer, -1) <= 0 then
  redis.call('HDEL', KEYS[5], producer)
end
if ARGV[3] == 'x' or ARGV[3] == 'p' then budget_refund(KEYS[#KEYS], m) end -- unsent: budget.go
local cutoff = now - tonumber(ARGV[6])
for i = 4, 9 do
  if i ~= 5 and i ~= 6 then
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', cutoff, 'LIMIT', 0, tonumber(ARGV[7]))) do
      redis.call('HDEL', KEYS[3], id)
      redis.call('ZREM', KEYS[i], id)
    end
  end
end
return 1
`)

// prunePerComplete is how many expired terminal messages and dead letters
// each Complete deletes per index: more than one, so pruning keeps up with
// any completion rate.
const prunePerComplete = 8

// Complete ends the lease with o.Status (sent, failed, expired or
// suppressed).
func (q *Queue) Complete(ctx context.Context, l *queue.Leased, o queue.Outcome) (err error) {
	if err := q.beginLease(ctx, "complete", l); err != nil {
		return err
	}
	c, err := q.completion(l, o, "")
	if err != nil {
		return err
	}
	start := time.Now()
	defer func() { q.m.observe("complete", start, err) }()
	return q.leaseResult("complete", l, completeScript.Run(ctx, q.c, c.keys, c.args...))
}

// completion is one run of completeScript: its keys and arguments.
type completion struct {
	keys []string
	args []any
}

// completion is the run of completeScript that ends l's lease with o, its
// event with error code code ("" the status's own).
func (q *Queue) completion(l *queue.Leased, o queue.Outcome, code string) (completion, error) {
	if !queue.CompleteStatus(o.Status) {
		return completion{}, fmt.Errorf("redisq: complete %s: status %q cannot end a lease", l.Message.ID, o.Status)
	}
	status, err := queue.StatusCode(o.Status)
	if err != nil {
		return completion{}, fmt.Errorf("redisq: complete %s: %w", l.Message.ID, err)
	}
	final := *l.Message
	final.Status, final.Attempts, final.ProviderID = o.Status, o.Attempts, o.ProviderID
	if o.Reason != "" {
		final.LastError = o.Reason
	}
	head, tail, err := queue.FinalPrefix(&final)
	if err != nil {
		return completion{}, fmt.Errorf("redisq: complete: %w", err)
	}
	created, _ := sms.IDTime(final.ID)
	keys := append([]string{q.k.lease(l.Message.Class), q.k.leases(), q.k.msgs(), q.k.done(), q.k.outstanding(),
		q.k.fin(final.ID)}, q.k.perClass(q.k.dead)...)
	keys = append(keys, q.k.outbox()...)
	use := q.usageOf(l.Message, o.Status)
	keys = append(keys, q.k.finDue())
	args := []any{l.Message.ID, l.Token, status, head, created.UnixMilli(), us(q.retention), prunePerComplete,
		o.ProviderID, o.Reason, tail, code}
	if o.Status == sms.StatusSent && o.ProviderID != "" && len(o.ProviderID) <= queue.MaxReceiptField {
		key, field, value := q.k.pidIndexEntry(o.ProviderID, created, time.Now())
		keys = append(keys, key)
		args = append(args, field, value, (q.retention + pidGeneration).Milliseconds())
	} else {
		args = append(args, "", "", "")
	}
	args = append(args, use.field, use.units, use.ttl)
	keys = append(keys, use.key, q.k.budget())
	return completion{keys: keys, args: args}, nil
}

// requeueScript ends a held lease by queueing the message again at the back
// of its class (ready at now + ARGV[3]), or with ARGV[7] at the place it
// was taken from (the lease's ready score and member, as recoverScript
// puts it back).
//
// KEYS[1] lease ZSET of the class, KEYS[2] leases HASH, KEYS[3] msgs HASH,
// KEYS[4] ready ZSET of the class, KEYS[5] seq counter.
// ARGV[1] id, ARGV[2] token, ARGV[3] delay µs, ARGV[4] 1 to spend an
// attempt, ARGV[5] last error (empty: keep the stored one), ARGV[6] 1 when
// the send crashed its sender (Crashes + 1), ARGV[7] 1 to keep its place.
// Returns 1, 0 when the lease is not held, -1 when it is not in KEYS[1].
var requeueScript = redis.NewScript(luasrc.Prelude + luasrc.Record + luasrc.CheckLease + luasrc.Lanes + `
local now = now_us()
local delay = tonumber(ARGV[3])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
local m = cjson.decode(redis.call('HGET', KEYS[3], ARGV[1]))
set(m, 's', 'q')
set_time(m, 'tu', now)
if ARGV[4] == '1' then set(m, 'a', (get(m, 'a') or 0) + 1) end
if ARGV[5] ~= '' then set(m, 'e', ARGV[5]) end
if ARGV[6] == '1' then set(m, 'x', (get(m, 'x') or 0) + 1) end
if ARGV[7] == '1' then
  redis.call('HSET', KEYS[3], ARGV[1], cjson.encode(m))
  lane_add(KEYS[4], lane_of(m), lease.s, lease.m, now)
  return 1
end
if delay > 0 then set_time(m, 'tb', now + delay, true) end
local member = new_member(redis.call('INCR', KEYS[5]), ARGV[1])
m.qm = member
redis.call('HSET', KEYS[3], ARGV[1], cjson.encode(m))
lane_add(KEYS[4], lane_of(m), now + delay, member, now)
return 1
`)

// Requeue ends the lease and queues the message again after o.After.
func (q *Queue) Requeue(ctx context.Context, l *queue.Leased, o queue.RequeueOptions) (err error) {
	if err := q.beginLease(ctx, "requeue", l); err != nil {
		return err
	}
	start := time.Now()
	defer func() { q.m.observe("requeue", start, err) }()
	spend, crashed, keep := 0, 0, 0
	if o.SpendAttempt {
		spend = 1
	}
	if o.Crashed {
		crashed = 1
	}
	if o.KeepPlace {
		keep = 1
	}
	keys := []string{q.k.lease(l.Message.Class), q.k.leases(), q.k.msgs(), q.k.ready(l.Message.Class), q.k.seq()}
	err = q.leaseResult("requeue", l, requeueScript.Run(ctx, q.c, keys, l.Message.ID, l.Token,
		us(o.After), spend, o.LastError, crashed, keep))
	if err == nil && o.Announce && (o.After <= 0 || o.KeepPlace) {
		q.announce(ctx, []sms.Class{l.Message.Class})
	}
	return err
}

// deadScript ends a held lease by making the message a dead letter.
//
// KEYS[1] lease ZSET of the class, KEYS[2] leases HASH, KEYS[3] msgs HASH,
// KEYS[4] dead ZSET of the class, KEYS[5] outstanding HASH, KEYS[6..9] the
// outbox (keys.outbox), KEYS[10] the message's usage HASH (luasrc.Usage).
// ARGV[1] id, ARGV[2] token, ARGV[3] reason, ARGV[4] attempts, ARGV[5..7]
// the usage field, units and expiry ms.
// Returns 1, 0 when the lease is not held, -1 when it is not in KEYS[1].
var deadScript = redis.NewScript(luasrc.Prelude + luasrc.Record + luasrc.Outbox + luasrc.Usage + luasrc.CheckLease + `
local now = now_us()
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
local m = cjson.decode(redis.call('HGET', KEYS[3], ARGV[1]))
set(m, 's', 'f')
set(m, 'd', true)
set(m, 'a', tonumber(ARGV[4]))
set_time(m, 'tu', now)
if ARGV[3] ~= '' then set(m, 'e', ARGV[3]) end
redis.call('HSET', KEYS[3], ARGV[1], cjson.encode(m))
redis.call('ZADD', KEYS[4], now, ARGV[1])
outbox_add({KEYS[6], KEYS[7], KEYS[8], KEYS[9]}, ARGV[1], m, 'failed', 'attempts_exhausted', now)
usage_add(KEYS[10], ARGV[5], ARGV[6], 1, ARGV[7])
local producer = get(m, 'p')
if redis.call('HINCRBY', KEYS[5], producer, -1) <= 0 then
  redis.call('HDEL', KEYS[5], producer)
end
return 1
`)

// Dead ends the lease and moves the message to the dead letters.
func (q *Queue) Dead(ctx context.Context, l *queue.Leased, reason string, attempts int) (err error) {
	if err := q.beginLease(ctx, "dead", l); err != nil {
		return err
	}
	start := time.Now()
	defer func() { q.m.observe("dead", start, err) }()
	keys := append([]string{q.k.lease(l.Message.Class), q.k.leases(), q.k.msgs(), q.k.dead(l.Message.Class), q.k.outstanding()}, q.k.outbox()...)
	use := q.usageOf(l.Message, sms.StatusFailed)
	keys = append(keys, use.key)
	return q.leaseResult("dead", l, deadScript.Run(ctx, q.c, keys, l.Message.ID, l.Token, reason, attempts,
		use.field, use.units, use.ttl))
}

func (q *Queue) beginLease(ctx context.Context, op string, l *queue.Leased) error {
	if err := q.begin(ctx, op); err != nil {
		return err
	}
	if l == nil || l.Message == nil || !l.Message.Class.Valid() {
		return fmt.Errorf("redisq: %s: invalid lease", op)
	}
	return nil
}

// leaseResult turns a lease script's reply into the seam's errors.
func (q *Queue) leaseResult(op string, l *queue.Leased, cmd *redis.Cmd) error {
	n, err := cmd.Int64()
	if err != nil {
		return fmt.Errorf("redisq: %s %s: %w", op, l.Message.ID, err)
	}
	switch n {
	case 1:
		return nil
	case 0:
		return fmt.Errorf("redisq: %s %s: %w", op, l.Message.ID, queue.ErrLeaseLost)
	}
	return fmt.Errorf("redisq: %s %s: lease is not in class %s (Leased.Message was changed)", op, l.Message.ID, l.Message.Class)
}

// recoverScript hands expired leases back to the ready queue at the place
// they were taken from, without spending an attempt.
//
// KEYS[1] lease ZSET of one class, KEYS[2] leases HASH, KEYS[3] msgs HASH,
// KEYS[4] ready ZSET of the class.
// ARGV[1] the most leases to move.
// Returns how many moved.
var recoverScript = redis.NewScript(luasrc.Prelude + luasrc.Record + luasrc.Lanes + `
local now = now_us()
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  local raw_lease = redis.call('HGET', KEYS[2], id)
  redis.call('HDEL', KEYS[2], id)
  local raw = redis.call('HGET', KEYS[3], id)
  if raw and raw_lease then
    local lease = cjson.decode(raw_lease)
    local m = cjson.decode(raw)
    set(m, 's', 'q')
    set_time(m, 'tu', now)
    redis.call('HSET', KEYS[3], id, cjson.encode(m))
    lane_add(KEYS[4], lane_of(m), lease.s, lease.m, now)
  end
end
return #ids
`)

// recoverBatch bounds one recover script so that Redis is never blocked long.
const recoverBatch = 500

// pruneScript deletes, from the msgs HASH, messages indexed in the given
// ZSETs (dead letters, and terminal messages an earlier release kept in
// msgs) whose score is older than the retention: what completeScript
// prunes as it goes, for an account where nothing completes. It also
// checks the account data's epoch marker: missing, it is written (ARGV[4]);
// missing or changed when the caller knew it (ARGV[3]), Redis lost the
// data since the caller last looked.
//
// KEYS[1] msgs HASH, KEYS[2] epoch STRING, KEYS[3..] the ZSETs.
// ARGV[1] retention µs, ARGV[2] the most to prune per ZSET, ARGV[3] the
// epoch the caller knows (empty for none), ARGV[4] a new epoch.
// Returns {pruned, epoch, 1 if the data was lost else 0}.
var pruneScript = redis.NewScript(luasrc.Prelude + `
local epoch = redis.call('GET', KEYS[2])
local lost = 0
if not epoch then
  epoch = ARGV[4]
  redis.call('SET', KEYS[2], epoch)
  if ARGV[3] ~= '' then lost = 1 end
elseif ARGV[3] ~= '' and epoch ~= ARGV[3] then
  lost = 1
end
local cutoff = now_us() - tonumber(ARGV[1])
local n = 0
for i = 3, #KEYS do
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', cutoff, 'LIMIT', 0, tonumber(ARGV[2]))) do
    redis.call('HDEL', KEYS[1], id)
    redis.call('ZREM', KEYS[i], id)
    n = n + 1
  end
end
return {n, epoch, lost}
`)

// pruneEvery is how often Recover also prunes (at most), and pruneBatch
// how many per index one run deletes at most: an idle replica pays one
// script a minute.
const (
	pruneEvery = time.Minute
	pruneBatch = 500
)

// prune runs pruneScript when pruneEvery has passed since this process
// last did; it reports Redis losing the account's data, which it would
// otherwise take for an empty queue.
func (q *Queue) prune(ctx context.Context) error {
	now := time.Now().UnixNano()
	last := q.pruned.Load()
	if now-last < int64(pruneEvery) || !q.pruned.CompareAndSwap(last, now) {
		return nil
	}
	known := ""
	if e := q.epoch.Load(); e != nil {
		known = *e
	}
	keys := append([]string{q.k.msgs(), q.k.epoch(), q.k.done()}, q.k.perClass(q.k.dead)...)
	res, err := pruneScript.Run(ctx, q.c, keys, us(q.retention), pruneBatch, known, newEpoch()).Slice()
	if err != nil {
		return fmt.Errorf("redisq: prune: %w", err)
	}
	n, _ := res[0].(int64)
	epoch, _ := res[1].(string)
	lost, _ := res[2].(int64)
	q.epoch.Store(&epoch)
	if lost == 1 {
		q.m.dataLost.Inc()
		q.log.Error("Redis lost this account's data (restarted without persistence, flushed, or failed over to an empty replica): "+
			"messages accepted before, pauses, idempotency keys and suppressions are gone; see the runbook, SmsgwRedisLostData",
			"account", q.account)
	}
	if n > 0 {
		q.log.Info("pruned dead letters past retention", "count", n)
	}
	return nil
}

// newEpoch is a random epoch marker value.
func newEpoch() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Recover hands every expired lease back; see queue.Queue.
func (q *Queue) Recover(ctx context.Context) (total int, err error) {
	if err := q.begin(ctx, "recover"); err != nil {
		return 0, err
	}
	start := time.Now()
	defer func() { q.m.observe("recover", start, err) }()
	for _, c := range sms.Classes {
		keys := []string{q.k.lease(c), q.k.leases(), q.k.msgs(), q.k.ready(c)}
		for {
			n, err := recoverScript.Run(ctx, q.c, keys, recoverBatch).Int()
			if err != nil {
				return total, fmt.Errorf("redisq: recover %s: %w", c, err)
			}
			total += n
			if n < recoverBatch {
				break
			}
		}
	}
	if total > 0 {
		q.log.Info("recovered expired leases", "count", total)
		q.announce(ctx, sms.Classes)
	}
	return total, q.prune(ctx)
}
