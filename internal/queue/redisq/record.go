package redisq

import (
	"encoding/json"
	"fmt"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// record is what the msgs HASH stores for one message, and the only JSON the
// Lua scripts read and edit: the message's fields as both backends store
// them (queue.Record, whose comment gives the schema's rules) and a parked
// receipt. Renaming a field means changing every script that names it (they
// edit through luaRecord below) and still reading the old name. The id is
// the HASH field. A value without "s" is a legacy message (see
// queue.LegacyMessage).
type record struct {
	queue.Record
	// Parked is the status code of a receipt parked on the message (the
	// scripts write it with its error code "re", which Go does not read).
	Parked string `json:"rs,omitempty"`
}

// toRecord is m as stored.
func toRecord(m *sms.Message) (record, error) {
	r, err := queue.ToRecord(m)
	return record{Record: r}, err
}

// decodeStored reads the value of message id in the msgs HASH: a record, or
// a legacy message.
func decodeStored(id string, raw any) (*sms.Message, error) {
	m, _, err := decodeParked(id, raw)
	return m, err
}

// decodeParked is decodeStored that also returns the status of a receipt
// parked on the message (empty if none).
func decodeParked(id string, raw any) (*sms.Message, sms.Status, error) {
	s, ok := raw.(string)
	if !ok {
		return nil, "", fmt.Errorf("unexpected message reply %T", raw)
	}
	var r record
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return nil, "", fmt.Errorf("decode stored message %s: %w", id, err)
	}
	if r.Status == "" {
		m, err := decodeLegacy(id, s)
		return m, "", err
	}
	m, err := r.Message(id)
	if err != nil || r.Parked == "" {
		return m, "", err
	}
	parked, ok := queue.CodeStatus(r.Parked)
	if !ok || !parked.Receipt() {
		return nil, "", fmt.Errorf("record %s: unknown receipt status code %q", id, r.Parked)
	}
	return m, parked, nil
}

func decodeLegacy(id, s string) (*sms.Message, error) {
	var l queue.LegacyMessage
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		return nil, fmt.Errorf("decode legacy message %s: %w", id, err)
	}
	// The scripts edit such a value in its own form (luaRecord), so it
	// stays legacy until pruned; dead letters are never pruned, so this
	// reader stays until a release that requires the queue to be drained
	// first.
	return l.Message(id)
}

// luaRecord gives the scripts the fields of a stored value by their record
// names, whether it is a record or a legacy message ("s" absent), and writes
// a legacy message in its own form: legacy names, status words, RFC 3339
// times.
//
// get(m, f): field f ('p' producer, 'a' attempts, 'g' segments).
// status_of(m): the status code, whichever form m has.
// set(m, f, v): sets field f to v; an empty string or 0 leaves it out.
// set_time(m, f, us, up): sets time field f to us (Redis clock µs), in ms
// rounded down, or up when up is true.
const luaRecord = `
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
