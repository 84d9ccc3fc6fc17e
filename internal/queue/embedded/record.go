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

// record is the value of the msgs bucket: the message's fields as both
// backends store them (queue.Record, whose comment gives the schema's rules)
// and the entry's bookkeeping. The id is the key. A value without "s" is a
// legacy record (see legacyRecord).
type record struct {
	queue.Record

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
	r, err := queue.ToRecord(&e.Msg)
	if err != nil {
		return record{}, err
	}
	parked, _ := queue.StatusCode(e.Parked) // "" for none
	return record{
		Record: r,
		Seq:    e.Seq, Due: e.Due, Token: e.Token, Lease: e.Lease, Owner: e.Owner, At: e.At,
		Parked: parked, ParkedCode: e.ParkedCode,
	}, nil
}

// entry is the record of message id as the form operations work on.
func (r *record) entry(id string) (*entry, error) {
	m, err := r.Message(id)
	if err != nil {
		return nil, err
	}
	parked, _ := queue.CodeStatus(r.Parked)
	return &entry{
		Msg: *m,
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
