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
// edit through luasrc.Record below) and still reading the old name. The id is
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
	// The scripts edit such a value in its own form (luasrc.Record), so it
	// stays legacy until pruned; dead letters are never pruned, so this
	// reader stays until a release that requires the queue to be drained
	// first.
	return l.Message(id)
}
