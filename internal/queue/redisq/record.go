package redisq

import (
	"encoding/json"
	"fmt"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// record is what the msgs HASH stores for one message, and the only JSON the
// Lua scripts read and edit. Its JSON names are the storage schema, not
// sms.Message's: renaming a field of the domain type changes nothing stored,
// and renaming a field here means changing every script that names it (they
// edit through luaRecord below) and still reading the old name.
//
// Names are short because Redis keeps every byte in RAM. Times are integer
// Unix milliseconds, 0 (left out) for none: Redis's cjson writes numbers with
// 14 significant digits, so a µs time (16 digits) would be rounded by the
// first script that rewrites the record, while ms stay exact until the year
// 5138. The id is the HASH field, not repeated in the record. The body and
// the full number (and its suppression-list id) are fields of their own, so
// that a finished record can drop them. A record always has "s"; a stored
// value without it is a legacy message (see queue.LegacyMessage).
type record struct {
	Producer  string `json:"p"`            // producer name; the outstanding HASH counts by it
	Class     uint8  `json:"c"`            // class code: 0 otp, 1 transactional, 2 marketing (queue.ClassCode)
	To        string `json:"to,omitempty"` // recipient, E.164
	NumberID  string `json:"ni,omitempty"` // the number's suppression-list id (sms.Message.NumberID); a take checks the list with it
	From      string `json:"fr,omitempty"` // sender id
	Body      string `json:"b,omitempty"`  // message text
	Reference string `json:"r,omitempty"`  // the producer's own id
	Segments  int    `json:"g,omitempty"`  // provider rate units the message costs

	CallbackURL string `json:"cb,omitempty"` // the message's own callback_url
	Callbacks   bool   `json:"w,omitempty"`  // status events wanted: every transition that ends or changes the story writes one to the outbox

	IdempotencyKey string `json:"k,omitempty"` // the producer's Idempotency-Key
	RequestHash    string `json:"h,omitempty"` // digest of the creating request

	Created   int64 `json:"tc,omitempty"` // created; the enqueue script sets it to the Redis clock when 0
	SendAt    int64 `json:"sa,omitempty"` // the producer's send_at
	NotBefore int64 `json:"tb,omitempty"` // not taken before; rounded up to the ms
	Expires   int64 `json:"te,omitempty"` // expiry
	Updated   int64 `json:"tu,omitempty"` // last change, Redis clock
	Sent      int64 `json:"ts,omitempty"` // sent, Redis clock

	Status     string `json:"s"`            // status code: q queued, l sending (leased), s sent, f failed, x expired, v delivered, u undelivered, c canceled
	Attempts   int    `json:"a,omitempty"`  // attempts spent
	Crashes    int    `json:"x,omitempty"`  // sends that crashed their sender
	LastError  string `json:"e,omitempty"`  // short, safe text of the last failure
	ProviderID string `json:"pm,omitempty"` // the provider's message id
	Dead       bool   `json:"d,omitempty"`  // a dead letter (status f)
	// Parked is the status code of a receipt parked on the message (the
	// scripts write it with its error code "re", which Go does not read).
	Parked string `json:"rs,omitempty"`
}

// toRecord is m as stored.
func toRecord(m *sms.Message) (record, error) {
	class, err := queue.ClassCode(m.Class)
	if err != nil {
		return record{}, err
	}
	status, err := queue.StatusCode(m.Status)
	if err != nil {
		return record{}, err
	}
	return record{
		Producer: m.Producer, Class: class, To: m.To, NumberID: m.NumberID, From: m.From, Body: m.Body,
		Reference: m.Reference, Segments: m.Segments, CallbackURL: m.CallbackURL, Callbacks: m.Callbacks,
		IdempotencyKey: m.IdempotencyKey, RequestHash: m.RequestHash,
		Created: queue.UnixMs(m.CreatedAt), SendAt: queue.UnixMs(m.SendAt), NotBefore: queue.UnixMsUp(m.NotBefore), Expires: queue.UnixMs(m.ExpiresAt),
		Updated: queue.UnixMs(m.UpdatedAt), Sent: queue.UnixMs(m.SentAt),
		Status: status, Attempts: m.Attempts, Crashes: m.Crashes, LastError: m.LastError, ProviderID: m.ProviderID, Dead: m.Dead,
	}, nil
}

// message is the record of message id as the domain type.
func (r record) message(id string) (*sms.Message, error) {
	class, ok := queue.CodeClass(r.Class)
	if !ok {
		return nil, fmt.Errorf("record %s: unknown class code %d", id, r.Class)
	}
	status, ok := queue.CodeStatus(r.Status)
	if !ok {
		return nil, fmt.Errorf("record %s: unknown status code %q", id, r.Status)
	}
	return &sms.Message{
		ID: id, Producer: r.Producer, Class: class, To: r.To, NumberID: r.NumberID, From: r.From, Body: r.Body,
		Reference: r.Reference, Segments: r.Segments, CallbackURL: r.CallbackURL, Callbacks: r.Callbacks,
		IdempotencyKey: r.IdempotencyKey, RequestHash: r.RequestHash,
		CreatedAt: queue.FromMs(r.Created), SendAt: queue.FromMs(r.SendAt), NotBefore: queue.FromMs(r.NotBefore), ExpiresAt: queue.FromMs(r.Expires),
		UpdatedAt: queue.FromMs(r.Updated), SentAt: queue.FromMs(r.Sent),
		Status: status, Attempts: r.Attempts, Crashes: r.Crashes, LastError: r.LastError, ProviderID: r.ProviderID, Dead: r.Dead,
	}, nil
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
	m, err := r.message(id)
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
