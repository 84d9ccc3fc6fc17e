// Package luasrc holds the Lua fragments the queue's Redis scripts share:
// each script is built by prepending the fragments it calls to its own body.
// They are source text only; the scripts themselves live with the calls
// that run them (package redisq).
package luasrc

// Prelude is prepended to every script that needs the clock or writes a
// stored record (scripts that edit one also take Record).
//
// now_us(): Redis TIME in µs, the only clock of the backend.
// iso(us): µs since the epoch as RFC 3339 UTC with µs, the form Go's
// time.Time decodes (records keep ms; legacy messages keep RFC 3339); Redis
// Lua has no os.date, so the civil date is computed with H. Hinnant's
// days-to-civil algorithm.
// fmt_us(us): a µs value as an exact decimal string (tostring and ".." would
// round it to 14 digits).
// id_of(member): the message id of a ready ZSET member "<seq:016>:<id>".
const Prelude = `
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function fmt_us(us)
  return string.format('%.0f', us)
end
local function iso(us)
  local s = math.floor(us / 1000000)
  local frac = us - s * 1000000
  local days = math.floor(s / 86400)
  local rem = s - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp + 3
  if mp >= 10 then m = mp - 9 end
  if m <= 2 then y = y + 1 end
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%06dZ', y, m, d,
    math.floor(rem / 3600), math.floor((rem % 3600) / 60), rem % 60, frac)
end
local function id_of(member)
  return string.sub(member, 18)
end
-- b36 writes an integer in base 36, as strconv.FormatInt(n, 36) does.
local function b36(n)
  if n == 0 then return '0' end
  local sign = ''
  if n < 0 then sign, n = '-', -n end
  local digits, out = '0123456789abcdefghijklmnopqrstuvwxyz', ''
  while n > 0 do
    local d = n % 36
    out = string.sub(digits, d + 1, d + 1) .. out
    n = (n - d) / 36
  end
  return sign .. out
end
-- A final LIST element names its message, then holds its final record.
-- fin_short(id) is the name written now (queue.FinalShort: 12 bytes, the
-- record follows at once); an earlier release wrote fin_short_old(id), the
-- id without "msg_", and a separator. fin_match returns the record of
-- element v and the length of its name (with any separator) when v names
-- id, else false.
local crockford = {}
for i = 1, 32 do crockford[string.sub('0123456789ABCDEFGHJKMNPQRSTVWXYZ', i, i)] = i - 1 end
local function fin_bytes(chars, n)
  local v = 0
  for i = 1, #chars do v = v * 32 + crockford[string.sub(chars, i, i)] end
  local out = {}
  for i = n, 1, -1 do
    out[i] = string.char(v % 256)
    v = math.floor(v / 256)
  end
  return table.concat(out)
end
local function fin_short(id)
  return fin_bytes(string.sub(id, 13, 14), 2) .. fin_bytes(string.sub(id, 15, 22), 5) .. fin_bytes(string.sub(id, 23, 30), 5)
end
local function fin_short_old(id) return string.sub(id, 5) end
local function fin_match(v, id)
  local short = fin_short(id)
  if string.sub(v, 1, 12) == short and string.sub(v, 13, 13) == '3' then return string.sub(v, 13), 12 end
  short = fin_short_old(id)
  if string.sub(v, 27, 27) == '\31' and string.sub(v, 1, 26) == short then return string.sub(v, 28), 27 end
  return false
end
-- fin_find returns the last final record of id (the element's text after
-- its name and separator) in the final LIST key, or false.
local function fin_find(key, id)
  local found = false
  for _, v in ipairs(redis.call('LRANGE', key, 0, -1)) do
    found = fin_match(v, id) or found
  end
  return found
end
-- fin_split takes a final record apart by field.
local function fin_split(rec)
  local t = {}
  for f in string.gmatch(rec .. '\31', '([^\31]*)\31') do t[#t + 1] = f end
  return t
end
-- fin_v3 reports whether the fields t of a final record are version 3
-- (queue/final.go): its first field is "3", the status code, the class
-- digit and flags; versions 1 and 2 were written by earlier releases.
local function fin_v3(t)
  return string.sub(t[1], 1, 1) == '3' and #t[1] >= 3
end
-- fin_pos gives the position of the fields the scripts read or edit in a
-- final record's fields t.
local fin_pos3 = {prod = 4, ref = 5, pid = 6, seg = 3, tu = 9, ts = 10, err = 11, cburl = 16}
local fin_pos2 = {prod = 7, ref = 8, pid = 9, seg = 5, err = 11, cburl = 18}
local function fin_pos(t)
  if fin_v3(t) then return fin_pos3 end
  return {prod = 7, ref = 8, pid = 9, seg = 5, err = 11, cburl = 18, tu = #t - 1, ts = #t}
end
-- fin_status is the status code of a final record's fields t (s, f, x, or
-- a word of version 1 or 2).
local function fin_status(t)
  if fin_v3(t) then return string.sub(t[1], 2, 2) end
  return t[2]
end
-- fin_receipt applies a receipt (record status code v, u or f and its
-- error code) to the final record rec: its status and last error (version
-- 3 keeps the code; 1 and 2 wrote the status out, as their words).
local fin_status_word = {v = 'delivered', u = 'undelivered', f = 'f'}
local function fin_receipt(rec, code, err)
  local t = fin_split(rec)
  if fin_v3(t) then
    t[1] = '3' .. code .. string.sub(t[1], 3)
  else
    t[2] = fin_status_word[code] or code
  end
  if err and err ~= '' then
    local at = fin_pos(t).err
    for i = #t + 1, at - 1 do t[i] = '' end
    t[at] = string.gsub(err, '\31', '')
  end
  return table.concat(t, '\31')
end
-- fin_event_fields gives outbox_add what it reads of a message (the record
-- names w, p, cb, r, c, g, pm, e) from the fields t of a final record
-- (fin_split). A version 1 record has no callback fields: no w, so no
-- event.
local function fin_event_fields(t)
  local function opt(v) if v == '' or v == nil then return nil end return v end
  local pos = fin_pos(t)
  local m = {p = t[pos.prod], r = opt(t[pos.ref]), pm = opt(t[pos.pid]), e = opt(t[pos.err])}
  local g, w
  if fin_v3(t) then
    m.c = tonumber(string.sub(t[1], 3, 3))
    g = 1
    if t[pos.seg] ~= '' then g = tonumber(t[pos.seg], 36) end
    w = string.find(string.sub(t[1], 4), 'w', 1, true) ~= nil
  else
    m.c = tonumber(t[3])
    g = tonumber(t[pos.seg], 36)
    w = t[1] ~= '1' and #t >= 20 and t[17] == '1'
  end
  if g and g > 0 then m.g = g end
  if w then
    m.w = true
    m.cb = opt(t[pos.cburl])
  end
  return m
end
-- fin_index reads the final LIST key once, for a script that looks up many
-- ids (cache: key -> table), and returns a table id -> last final record
-- (false for none).
local function fin_index(cache, key)
  local t = cache[key]
  if t then return t end
  local byname, any = {}, false
  for _, v in ipairs(redis.call('LRANGE', key, 0, -1)) do
    if string.sub(v, 13, 13) == '3' then byname[string.sub(v, 1, 12)] = string.sub(v, 13) any = true end
    if string.sub(v, 27, 27) == '\31' then byname[string.sub(v, 1, 26)] = string.sub(v, 28) any = true end
  end
  -- An empty LIST (the usual case for a second still being enqueued)
  -- answers without computing the names looked up.
  t = setmetatable({}, {__index = function(_, id)
    if not any then return false end
    return byname[fin_short(id)] or byname[fin_short_old(id)] or false
  end})
  cache[key] = t
  return t
end
-- Compaction (compact.go): a creation second's final LIST becomes one
-- compressed STRING, its blob, once no script has written to the LIST for
-- a while; the scripts cannot read a blob, so one that must edit a
-- compacted record is given the blob's element by the caller and puts it
-- back into the LIST first (fin_extract), where the LIST's element is the
-- newer one of the two from then on.
-- fin_sec is the creation second (a decimal string) of creation time ms.
local function fin_sec(ms)
  return string.format('%.0f', math.floor(tonumber(ms) / 1000))
end
-- fin_due records a write to the final LIST of second sec in the ZSET due,
-- scored by now (µs, kept as ms): compaction waits for the second to be
-- quiet.
local function fin_due(due, sec, now)
  redis.call('ZADD', due, math.floor(now / 1000), sec)
end
-- fin_extract appends element elem of the blob key blob to the final LIST
-- list, when the blob is still the one the caller read (sha: its SHA-1);
-- the LIST expires no earlier than the blob. Returns the LIST's length,
-- or false when the blob changed (or is gone): the caller reads it again.
local function fin_extract(list, blob, elem, sha)
  local b = redis.call('GET', blob)
  if not b or redis.sha1hex(b) ~= sha then return false end
  local n = redis.call('RPUSH', list, elem)
  local ttl = redis.call('PTTL', blob)
  if ttl > 0 and redis.call('PTTL', list) < ttl then redis.call('PEXPIRE', list, ttl) end
  return n
end
-- fin_times completes a final record from queue.FinalPrefix's head and
-- tail (created_ms: the id's creation time) with its two times on the
-- Redis clock: the last change, now, and for a send the same time written
-- out (a receipt then keeps the record's length).
local function fin_times(head, tail, created_ms, now, sent)
  local tu = b36(math.floor(now / 1000) - tonumber(created_ms))
  local ts = ''
  if sent then ts = tu end
  return head .. tu .. '\31' .. ts .. tail
end
-- fin_append writes final record rec of id to the final LIST list of its
-- creation second, which then expires retention (µs) after this write, and
-- marks the second for compaction (due). A second compacted already gets a
-- LIST again (compact.go): its element is newer than the blob's.
local function fin_append(list, due, id, rec, created_ms, retention, now)
  redis.call('RPUSH', list, fin_short(id) .. rec)
  redis.call('PEXPIRE', list, math.ceil(tonumber(retention) / 1000))
  fin_due(due, fin_sec(created_ms), now)
end
local function new_member(seq, id)
  return string.format('%016d', seq) .. ':' .. id
end
`

// Record gives the scripts the fields of a stored value by their record
// names, whether it is a record or a legacy message ("s" absent), and writes
// a legacy message in its own form: legacy names, status words, RFC 3339
// times.
//
// get(m, f): field f ('p' producer, 'a' attempts, 'g' segments).
// status_of(m): the status code, whichever form m has.
// set(m, f, v): sets field f to v; an empty string or 0 leaves it out.
// set_time(m, f, us, up): sets time field f to us (Redis clock µs), in ms
// rounded down, or up when up is true.
const Record = `
local legacy_name = {s = 'status', a = 'attempts', e = 'last_error', pm = 'provider_message_id',
  d = 'dead', tb = 'not_before', tu = 'updated_at', ts = 'sent_at', p = 'producer', g = 'segments',
  x = 'crashes'}
local legacy_status = {q = 'queued', l = 'sending', s = 'sent', f = 'failed', x = 'expired',
  v = 'delivered', u = 'undelivered', c = 'canceled'}
local function get(m, f)
  if m.s then return m[f] end
  return m[legacy_name[f]]
end
local function set(m, f, v)
  if v == '' or v == 0 then v = nil end
  if m.s then
    m[f] = v
  else
    if f == 's' then v = legacy_status[v] end
    m[legacy_name[f]] = v
  end
end
local function status_of(m)
  if m.s then return m.s end
  for code, word in pairs(legacy_status) do
    if word == m.status then return code end
  end
  return nil
end
local function set_time(m, f, us, up)
  if not m.s then
    m[legacy_name[f]] = iso(us)
  elseif up then
    m[f] = math.ceil(us / 1000)
  else
    m[f] = math.floor(us / 1000)
  end
end
`

// Outbox is the one writer of the outbox. Every script whose transition
// ends or changes a message's visible status calls outbox_add in the same
// script, so the event exists exactly when the change does.
//
// outbox_add(ok, id, m, status, code, now): ok the four keys of
// keys.outbox() (events HASH, due ZSET, age ZSET, seq counter) as a Lua
// table, id the message id, m its decoded record after the change, status
// the status word the event reports, code the error code (” for none), now
// Redis µs. Writes nothing for a message stored without "w" (no
// destination; every legacy message).
//
// event_words and event_codes map a record's status code to the event's
// status word and error code.
const Outbox = `
local event_words = {s = 'sent', f = 'failed', x = 'expired', v = 'delivered', u = 'undelivered', c = 'canceled',
  p = 'suppressed'}
local event_codes = {s = '', f = 'rejected', x = 'expired', v = '', u = 'undelivered', c = '', p = 'opted_out'}
local function outbox_add(ok, id, m, status, code, now)
  if not m.w then return end
  local eid = 'evt_' .. string.sub(id, 5) .. '_' .. redis.call('INCR', ok[4])
  local ev = {m = id, p = m.p, u = m.cb, s = status, r = m.r, c = m.c, g = m.g, pm = m.pm,
    t = math.floor(now / 1000)}
  if code ~= '' then
    ev.ec = code
    ev.er = m.e
  end
  redis.call('HSET', ok[1], eid, cjson.encode(ev))
  redis.call('ZADD', ok[2], now, eid)
  redis.call('ZADD', ok[3], now, eid)
end
`

// CheckLease is the start of every script that acts on a lease: it ends
// the script with 0 unless the lease of ARGV[1] is held with token ARGV[2],
// and with -1 if the lease is not in the lease ZSET KEYS[1] (the caller
// changed Leased.Message.Class: acting on the wrong class's keys would leave
// a lease behind for Recover to hand out again). It expects the leases HASH
// as KEYS[2] and leaves the lease in lease.
const CheckLease = `
local raw_lease = redis.call('HGET', KEYS[2], ARGV[1])
if not raw_lease then return 0 end
local lease = cjson.decode(raw_lease)
if lease.t ~= ARGV[2] then return 0 end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return -1 end
`

// Budget is the budget step of the enqueue script. Field names are made as
// queue.BudgetField and queue.BudgetCurrent make them: the producer, the
// byte 0x1f, the period id (or its first letter, the kind).
//
// Enqueue ARGV, per message from its offset i: [i+21] index in KEYS of the
// budget HASH (0: no budget), [i+22] units, [i+23] the day's id ("" none),
// [i+24] its limit (0: none), [i+25] the month's id, [i+26] its limit.
// Each count is read at most once a run and written once at its end
// (budget_write), like the outstanding counts.
const Budget = `
local budget_used, budget_dirty = {}, {}
local function budget_count(bk, f)
  if budget_used[f] == nil then budget_used[f] = tonumber(redis.call('HGET', KEYS[bk], f) or '0') end
  return budget_used[f]
end
-- budget_check: 0 when message i's units fit every period it names,
-- else 1 (daily) or 2 (monthly) and that period's count.
local function budget_check(i, p)
  local bk = tonumber(ARGV[i + 21])
  if bk == 0 then return 0, 0 end
  local units = tonumber(ARGV[i + 22])
  for k = 0, 1 do
    local id, limit = ARGV[i + 23 + 2 * k], tonumber(ARGV[i + 24 + 2 * k])
    if id ~= '' and limit > 0 then
      local used = budget_count(bk, p .. '\31' .. id)
      if used + units > limit then return k + 1, used end
    end
  end
  return 0, 0
end
-- budget_charge adds message i's units to its periods (it is stored).
local function budget_charge(i, p)
  local bk = tonumber(ARGV[i + 21])
  if bk == 0 then return end
  local units = tonumber(ARGV[i + 22])
  for k = 0, 1 do
    local id = ARGV[i + 23 + 2 * k]
    if id ~= '' then
      local f = p .. '\31' .. id
      budget_used[f] = budget_count(bk, f) + units
      budget_dirty[f] = {KEYS[bk], p .. '\31', id}
    end
  end
end
-- budget_write stores the counts charged, dropping each producer's
-- previous period of the kind.
local function budget_write()
  for f, d in pairs(budget_dirty) do
    local cur = d[2] .. string.sub(d[3], 1, 1)
    local old = redis.call('HGET', d[1], cur)
    if old ~= d[3] then
      if old then redis.call('HDEL', d[1], d[2] .. old) end
      redis.call('HSET', d[1], cur, d[3])
    end
    redis.call('HSET', d[1], f, budget_used[f])
  end
end
`

// BudgetRefund is the give-back of the scripts that end a message
// unsent (with Record).
const BudgetRefund = `
-- budget_refund gives the units of m (a decoded record) back to the
-- periods it was charged to; a period no longer kept gets nothing.
local function budget_refund(key, m)
  local units = tonumber(m.bu or 0)
  if units <= 0 then return end
  local p = get(m, 'p')
  for _, pf in ipairs({'bd', 'bm'}) do
    if m[pf] then
      local f = p .. '\31' .. m[pf]
      local used = redis.call('HGET', key, f)
      if used then redis.call('HSET', key, f, math.max(tonumber(used) - units, 0)) end
    end
  end
end
`

// Usage is the one writer of the usage HASHes; the scripts that store
// or end a message call it in the step that does so.
//
// usage_add(key, field, units, n, ttl): adds n messages and n × units
// units to field of HASH key (queue.UsageCount) and sets its expiry to ttl
// ms; nothing without a key.
const Usage = `
local function usage_add(key, field, units, n, ttl)
  if not key or key == '' or field == '' then return end
  redis.call('HINCRBY', key, 'm' .. field, n)
  redis.call('HINCRBY', key, 'u' .. field, n * tonumber(units))
  redis.call('PEXPIRE', key, ttl)
end
`

// Lanes holds the fragments of the sender lanes (queue.LaneOf): a class's
// queued messages of one sender are a ZSET of their own, its key the
// class's ready key (keys.ready, the lane of the provider's default
// sender, as before lanes) followed by ":" and the lane's tag, the first
// 16 hex digits of the SHA-1 of the sender (never the number in clear).
// A class's lanes other than the default one are in its lane index, a
// ZSET keyed ready key ":lanes", member the tag, score the later of the
// lane's head's ready time and the lane's hold; the holds are one HASH of
// the account (tag -> held until µs; "" the default lane), named from
// the ready key as "laneholds". Every name is the ready key passed in
// KEYS with a suffix, so it shares that key's hash tag and Cluster slot.
//
// lane_tag(from): the tag of a sender ("" for the default one).
// lane_of(m): the tag of a decoded record's (or legacy message's) sender.
// lane_of_text(rec): the same, read from a record's JSON text.
// lane_key(ready, tag): the lane's ZSET.
// lane_hold(ready, tag, now): the lane's hold in force (0: none; an
// expired one is deleted).
// lane_rescore(ready, tag, now): puts the lane into the index at its
// score, or out of it when empty (the default lane has no entry).
// lane_add(ready, tag, score, member, now) and lane_rem(ready, tag,
// member, now) add and remove a message and rescore its lane (lane_rem
// also from the default lane, where messages queued before lanes are).
// lane_keys(ready): the ZSETs of every lane of the class.
// next_due(ready, now) and next_wait(ready, now), the take's, follow.
const Lanes = `
local function lane_tag(from)
  if type(from) ~= 'string' or from == '' then return '' end
  return string.sub(redis.sha1hex(from), 1, 16)
end
local function lane_of(m)
  if m.fr ~= nil then return lane_tag(m.fr) end
  return lane_tag(m.from)
end
local function lane_of_text(rec)
  if not string.find(rec, '"fr":', 1, true) then return '' end
  local f = string.match(rec, '"fr":"([^"\\]*)"')
  if f then return lane_tag(f) end
  return lane_tag(cjson.decode(rec).fr)
end
local function lane_key(ready, tag)
  if tag == '' then return ready end
  return ready .. ':' .. tag
end
local function lane_index(ready) return ready .. ':lanes' end
local function lane_holds(ready) return (string.gsub(ready, 'ready:%a+$', 'laneholds')) end
local function lane_hold(ready, tag, now)
  local holds = lane_holds(ready)
  local u = tonumber(redis.call('HGET', holds, tag))
  if not u then return 0 end
  if u > now then return u end
  redis.call('HDEL', holds, tag)
  return 0
end
local function lane_rescore(ready, tag, now)
  if tag == '' then return end
  local h = redis.call('ZRANGE', lane_key(ready, tag), 0, 0, 'WITHSCORES')
  if #h == 0 then
    redis.call('ZREM', lane_index(ready), tag)
    return
  end
  redis.call('ZADD', lane_index(ready), math.max(tonumber(h[2]), lane_hold(ready, tag, now)), tag)
end
local function lane_add(ready, tag, score, member, now)
  redis.call('ZADD', lane_key(ready, tag), score, member)
  lane_rescore(ready, tag, now)
end
local function lane_rem(ready, tag, member, now)
  local n = redis.call('ZREM', lane_key(ready, tag), member)
  if n > 0 then
    lane_rescore(ready, tag, now)
  elseif tag ~= '' then
    n = redis.call('ZREM', ready, member)
  end
  return n
end
local function lane_keys(ready)
  local keys = {ready}
  for _, tag in ipairs(redis.call('ZRANGE', lane_index(ready), 0, -1)) do keys[#keys + 1] = lane_key(ready, tag) end
  return keys
end
-- next_due finds the oldest due message of the lanes of class ready that
-- are not held: the default lane's head, or the head of the lowest
-- scored lane of the index, whichever is older (equal times: the lower
-- sequence; lanes of the index of equal score, up to 16 of them, by
-- their heads' sequence too). A lane of the index found held, or scored
-- otherwise than its head and hold say, is scored again and the index
-- looked at again: each is met once a hold.
-- Returns the lane's ZSET, tag, the member and its score (as Redis wrote
-- it), or nil.
local function next_due(ready, now)
  local lk, tag, member, score
  if lane_hold(ready, '', now) == 0 then
    local r = redis.call('ZRANGEBYSCORE', ready, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)
    if #r > 0 then lk, tag, member, score = ready, '', r[1], r[2] end
  end
  local index = lane_index(ready)
  for _ = 1, 16 do
    local l = redis.call('ZRANGEBYSCORE', index, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1)
    if #l == 0 then break end
    local t = l[1]
    local key = lane_key(ready, t)
    local h = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    if #h == 0 then
      redis.call('ZREM', index, t)
    else
      local s = math.max(tonumber(h[2]), lane_hold(ready, t, now))
      if s ~= tonumber(l[2]) then
        redis.call('ZADD', index, s, t)
      else
        -- lanes of equal score (a batch enqueued at one instant) leave
        -- by their heads' sequence
        local bt, bkey, bh = t, key, h
        for _, t2 in ipairs(redis.call('ZRANGEBYSCORE', index, l[2], l[2], 'LIMIT', 0, 16)) do
          if t2 ~= t then
            local k2 = lane_key(ready, t2)
            local h2 = redis.call('ZRANGE', k2, 0, 0, 'WITHSCORES')
            if #h2 > 0 and tonumber(h2[2]) == s and h2[1] < bh[1] then bt, bkey, bh = t2, k2, h2 end
          end
        end
        local hs = tonumber(bh[2])
        if not lk or hs < tonumber(score) or (hs == tonumber(score) and bh[1] < member) then
          lk, tag, member, score = bkey, bt, bh[1], bh[2]
        end
        break
      end
    end
  end
  return lk, tag, member, score
end
-- next_wait is the µs until the class's next message is due in a lane not
-- held (its hold counted), or nil when none is queued.
local function next_wait(ready, now)
  local w
  local head = redis.call('ZRANGE', ready, 0, 0, 'WITHSCORES')
  if #head > 0 then w = math.max(tonumber(head[2]), lane_hold(ready, '', now)) - now end
  local l = redis.call('ZRANGE', lane_index(ready), 0, 0, 'WITHSCORES')
  if #l > 0 and (not w or tonumber(l[2]) - now < w) then w = tonumber(l[2]) - now end
  return w
end
`
