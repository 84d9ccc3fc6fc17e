package redisq

// luaPrelude is prepended to every script that needs the clock or writes a
// stored record (scripts that edit one also take luaRecord, record.go).
//
// now_us(): Redis TIME in µs, the only clock of the backend.
// iso(us): µs since the epoch as RFC 3339 UTC with µs, the form Go's
// time.Time decodes (records keep ms; legacy messages keep RFC 3339); Redis
// Lua has no os.date, so the civil date is computed with H. Hinnant's
// days-to-civil algorithm.
// fmt_us(us): a µs value as an exact decimal string (tostring and ".." would
// round it to 14 digits).
// id_of(member): the message id of a ready ZSET member "<seq:016>:<id>".
const luaPrelude = `
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
-- fin_find returns the last final record of id (the element's text after
-- the id and its separator) in the final LIST key, or false.
local function fin_find(key, id)
  local short = string.sub(id, 5) .. '\31'
  local found = false
  for _, v in ipairs(redis.call('LRANGE', key, 0, -1)) do
    if string.sub(v, 1, #short) == short then found = string.sub(v, #short + 1) end
  end
  return found
end
-- fin_split and fin_join take a final record apart by field and back.
local function fin_split(rec)
  local t = {}
  for f in string.gmatch(rec .. '\31', '([^\31]*)\31') do t[#t + 1] = f end
  return t
end
-- fin_receipt applies a receipt (record status code v, u or f and its
-- error code) to the final record rec (or its prefix): its status and
-- last error fields, in queue.EncodeFinal's words.
local fin_status_word = {v = 'delivered', u = 'undelivered', f = 'f'}
local function fin_receipt(rec, code, err)
  local t = fin_split(rec)
  t[2] = fin_status_word[code] or code
  if err and err ~= '' then t[11] = string.gsub(err, '\31', '') end
  -- a prefix's trailing separator comes back as an empty last field
  return table.concat(t, '\31')
end
-- fin_event_fields gives outbox_add what it reads of a message (the record
-- names w, p, cb, r, c, g, pm, e) from the fields t of a final record
-- (fin_split; queue.FinalPrefix's order). A version 1 record has no
-- callback fields: no w, so no event.
local function fin_event_fields(t)
  local function opt(v) if v == '' then return nil end return v end
  local m = {p = t[7], r = opt(t[8]), c = tonumber(t[3]), pm = opt(t[9]), e = opt(t[11])}
  local g = tonumber(t[5], 36)
  if g and g > 0 then m.g = g end
  if t[1] ~= '1' and #t >= 20 and t[17] == '1' then
    m.w = true
    m.cb = opt(t[18])
  end
  return m
end
-- fin_index reads the final LIST key once into a table id -> last final
-- record, for a script that looks up many ids (cache: key -> table).
local function fin_index(cache, key)
  local t = cache[key]
  if t then return t end
  t = {}
  for _, v in ipairs(redis.call('LRANGE', key, 0, -1)) do
    local sep = string.find(v, '\31', 1, true)
    if sep then t['msg_' .. string.sub(v, 1, sep - 1)] = string.sub(v, sep + 1) end
  end
  cache[key] = t
  return t
end
local function new_member(seq, id)
  return string.format('%016d', seq) .. ':' .. id
end
`
