package embedded

import (
	"encoding/json"
	"fmt"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// entry is a message with its queue bookkeeping, the form every operation
// works on; record is how it is stored.
type entry struct {
	Msg   sms.Message
	Seq   uint64 // enqueue order, the FIFO tie-break
	Due   int64  // position in ready while queued; kept while leased so Recover restores it
	Token string // lease token while sending
	Lease int64  // lease expiry while sending
	Owner string // lease holder while sending
	At    int64  // when it became terminal (done/dead key)
	// A receipt that arrived before the send was recorded: its status and
	// error code, applied by Complete when it records sent.
	Parked     sms.Status
	ParkedCode string
}

// record is the value of the msgs bucket. Its JSON names are the storage
// schema, not sms.Message's: renaming a field of the domain type changes
// nothing stored, and renaming a field here means still reading the old name.
// Names are short (every page is fsynced); times are integer Unix
// milliseconds, 0 (left out) for none, the resolution of the store's indexes.
// The id is the key, not repeated in the record. The body and the full number
// (and its suppression-list id) are fields of their own, so that a finished
// record can drop them. A record always has "s"; a value without it is a
// legacy record (see legacyRecord).
type record struct {
	Producer  string `json:"p"`            // producer name; the out bucket counts by it
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

	Created   int64 `json:"tc,omitempty"` // created
	SendAt    int64 `json:"sa,omitempty"` // the producer's send_at
	NotBefore int64 `json:"tb,omitempty"` // not taken before; rounded up to the ms
	Expires   int64 `json:"te,omitempty"` // expiry
	Updated   int64 `json:"tu,omitempty"` // last change
	Sent      int64 `json:"ts,omitempty"` // sent

	Status     string `json:"s"`            // status code: q queued, l sending (leased), s sent, f failed, x expired, v delivered, u undelivered, c canceled
	Attempts   int    `json:"a,omitempty"`  // attempts spent
	Crashes    int    `json:"x,omitempty"`  // sends that crashed their sender
	LastError  string `json:"e,omitempty"`  // short, safe text of the last failure
	ProviderID string `json:"pm,omitempty"` // the provider's message id
	Dead       bool   `json:"d,omitempty"`  // a dead letter (status f)

	Seq   uint64 `json:"sq"`           // entry.Seq
	Due   int64  `json:"du"`           // entry.Due, ms
	Token string `json:"lt,omitempty"` // entry.Token
	Lease int64  `json:"le,omitempty"` // entry.Lease, ms
	Owner string `json:"lo,omitempty"` // entry.Owner
	At    int64  `json:"at,omitempty"` // entry.At, ms

	Parked     string `json:"rs,omitempty"` // entry.Parked, a status code
	ParkedCode string `json:"re,omitempty"` // entry.ParkedCode
}

// toRecord is e as stored.
func toRecord(e *entry) (record, error) {
	m := &e.Msg
	class, err := queue.ClassCode(m.Class)
	if err != nil {
		return record{}, fmt.Errorf("message %s: %w", m.ID, err)
	}
	status, err := queue.StatusCode(m.Status)
	if err != nil {
		return record{}, fmt.Errorf("message %s: %w", m.ID, err)
	}
	parked, _ := queue.StatusCode(e.Parked) // "" for none
	return record{
		Producer: m.Producer, Class: class, To: m.To, NumberID: m.NumberID, From: m.From, Body: m.Body,
		Reference: m.Reference, Segments: m.Segments, CallbackURL: m.CallbackURL, Callbacks: m.Callbacks,
		IdempotencyKey: m.IdempotencyKey, RequestHash: m.RequestHash,
		Created: queue.UnixMs(m.CreatedAt), SendAt: queue.UnixMs(m.SendAt), NotBefore: queue.UnixMsUp(m.NotBefore), Expires: queue.UnixMs(m.ExpiresAt),
		Updated: queue.UnixMs(m.UpdatedAt), Sent: queue.UnixMs(m.SentAt),
		Status: status, Attempts: m.Attempts, Crashes: m.Crashes, LastError: m.LastError, ProviderID: m.ProviderID, Dead: m.Dead,
		Seq: e.Seq, Due: e.Due, Token: e.Token, Lease: e.Lease, Owner: e.Owner, At: e.At,
		Parked: parked, ParkedCode: e.ParkedCode,
	}, nil
}

// entry is the record of message id as the form operations work on.
func (r *record) entry(id string) (*entry, error) {
	class, ok := queue.CodeClass(r.Class)
	if !ok {
		return nil, fmt.Errorf("unknown class code %d", r.Class)
	}
	status, ok := queue.CodeStatus(r.Status)
	if !ok {
		return nil, fmt.Errorf("unknown status code %q", r.Status)
	}
	parked, _ := queue.CodeStatus(r.Parked)
	return &entry{
		Msg: sms.Message{
			ID: id, Producer: r.Producer, Class: class, To: r.To, NumberID: r.NumberID, From: r.From, Body: r.Body,
			Reference: r.Reference, Segments: r.Segments, CallbackURL: r.CallbackURL, Callbacks: r.Callbacks,
			IdempotencyKey: r.IdempotencyKey, RequestHash: r.RequestHash,
			CreatedAt: queue.FromMs(r.Created), SendAt: queue.FromMs(r.SendAt), NotBefore: queue.FromMs(r.NotBefore), ExpiresAt: queue.FromMs(r.Expires),
			UpdatedAt: queue.FromMs(r.Updated), SentAt: queue.FromMs(r.Sent),
			Status: status, Attempts: r.Attempts, Crashes: r.Crashes, LastError: r.LastError, ProviderID: r.ProviderID, Dead: r.Dead,
		},
		Seq: r.Seq, Due: r.Due, Token: r.Token, Lease: r.Lease, Owner: r.Owner, At: r.At,
		Parked: parked, ParkedCode: r.ParkedCode,
	}, nil
}

// encodeEntry is the stored value of e, and e as a later read returns it
// (times to the ms).
func encodeEntry(e *entry) ([]byte, *entry, error) {
	r, err := toRecord(e)
	if err != nil {
		return nil, nil, err
	}
	v, err := json.Marshal(&r)
	if err != nil {
		return nil, nil, fmt.Errorf("encode %s: %w", e.Msg.ID, err)
	}
	stored, err := r.entry(e.Msg.ID)
	if err != nil {
		return nil, nil, err
	}
	return v, stored, nil
}

// decodeEntry reads the value of message id in the msgs bucket: a record, or
// a legacy record.
func decodeEntry(id string, v []byte) (*entry, error) {
	var r record
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, err
	}
	if r.Status == "" {
		return decodeLegacy(id, v)
	}
	return r.entry(id)
}

// legacyRecord is how releases before the record type stored a message: the
// message as sms.Message's JSON of the time under "msg", frozen here (with
// queue.LegacyMessage) so that later changes to the domain type do not change how
// those values read. A legacy record is read as an entry and written back as
// a record, so each one is converted the first time it changes.
type legacyRecord struct {
	Msg   queue.LegacyMessage `json:"msg"`
	Seq   uint64              `json:"seq"`
	Due   int64               `json:"due"`
	Token string              `json:"token"`
	Lease int64               `json:"lease"`
	Owner string              `json:"owner"`
	At    int64               `json:"at"`
}

func decodeLegacy(id string, v []byte) (*entry, error) {
	var l legacyRecord
	if err := json.Unmarshal(v, &l); err != nil {
		return nil, fmt.Errorf("legacy record: %w", err)
	}
	m, err := l.Msg.Message(id)
	if err != nil {
		return nil, err
	}
	return &entry{
		Msg: *m,
		Seq: l.Seq, Due: l.Due, Token: l.Token, Lease: l.Lease, Owner: l.Owner, At: l.At,
	}, nil
}
