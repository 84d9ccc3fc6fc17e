package redisq

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"smsgw/internal/keyspace"
	"smsgw/internal/sms"
)

// keys builds every Redis key of one provider account's queue. All of them
// start with the account's hash tag (keyspace), so every script's keys live
// in one Redis Cluster slot; no key name is ever built inside Lua.
type keys struct {
	tag string // the account's prefix "q" (keyspace.Space.Prefix)
}

// newKeys names the queue keys of account. New has already refused an
// account that keyspace.ValidateAccount refuses, so the error of
// keyspace.New cannot occur here.
func newKeys(account string) keys {
	sp, _ := keyspace.New(account)
	return keys{tag: sp.Prefix("q")}
}

// msgs is the HASH id -> the message's record (record.go; a value stored by
// an earlier release is a legacy message). A message stays while queued or
// leased, then until Retention after Complete; a dead letter until retried.
func (k keys) msgs() string { return k.tag + "msgs" }

// leases is the HASH id -> lease JSON {t: token, o: owner, m: ready member, s: ready score}.
func (k keys) leases() string { return k.tag + "leases" }

// seq is the counter that orders messages of equal ready time (FIFO).
func (k keys) seq() string { return k.tag + "seq" }

// epoch STRING: a random value written once for the account's data (by
// the first prune); a replica that finds it gone, or changed, knows Redis
// lost the data it held.
func (k keys) epoch() string { return k.tag + "epoch" }

// done is the ZSET of completed messages (sent, failed or expired by
// Complete; not dead letters) scored by completion time µs, for retention.
func (k keys) done() string { return k.tag + "done" }

// fin is the LIST of the final records (queue.EncodeFinal) of the messages
// created in the same second as id (the id holds its creation time), each
// element "<queue.FinalShort(id)><final record>" (an earlier release wrote
// "<id without msg_>\x1f<final record>": both are read). A completed message leaves
// msgs for its bucket, which expires Retention after its last completion:
// a bucket keeps about a second's messages in Redis's compact list encoding,
// and needs no index to be pruned.
func (k keys) fin(id string) string {
	at, _ := sms.IDTime(id)
	return k.finAt(at.Unix())
}

// finAt is the final LIST of the messages created in Unix second sec.
func (k keys) finAt(sec int64) string { return k.tag + "fin:" + strconv.FormatInt(sec, 10) }

// finBlob is the compacted final records of the messages created in Unix
// second sec (compact.go): one STRING that a compaction pass made of the
// second's final LIST once nothing had written to it for a while. A second
// may have both: an element of its LIST is newer than the blob's record
// of the same message (a receipt to a compacted record, a message that
// completed late into the second).
func (k keys) finBlob(sec int64) string { return k.tag + "fz:" + strconv.FormatInt(sec, 10) }

// finDue is the ZSET of the creation seconds whose final LIST waits for
// compaction, scored by the last write to the LIST (Redis clock, ms), or
// while a replica's compaction claims the second, by the later time that
// claim gives it (compact.go, claimDueScript).
func (k keys) finDue() string { return k.tag + "fz:due" }

// early is the STRING that keeps a receipt for id before id is stored
// (queue.EarlyReceiptWindow): its status code and error code; it expires
// with the window.
func (k keys) early(id string) string { return k.tag + "early:" + id }

// batch is the LIST of the ids of the messages producer stored with batch
// id batch (queue.Batches), written by the enqueue script with them; it
// expires queue.BatchKeep after the latest message it took in. Hashed like
// idem, so that any producer name gives a bounded name.
func (k keys) batch(producer, batch string) string {
	h := sha256.Sum256([]byte(producer))
	return k.tag + "batch:" + batch + ":" + hex.EncodeToString(h[:8])
}

// outstanding is the HASH producer -> queued + leased messages.
func (k keys) outstanding() string { return k.tag + "outstanding" }

// ready is the ZSET of one class's queued messages of the provider's
// default sender (and of every sender before lanes): member
// "<seq:016>:<id>", score the ready time in Redis µs. Each other sender's
// lane, the class's lane index and the account's lane holds are named
// from it with a suffix (luasrc.Lanes), in the same hash tag.
func (k keys) ready(c sms.Class) string { return k.tag + "ready:" + c.String() }

// lease is the ZSET of one class's leased ids scored by lease expiry µs.
func (k keys) lease(c sms.Class) string { return k.tag + "lease:" + c.String() }

// dead is the ZSET of one class's dead letters scored by time of death µs.
func (k keys) dead(c sms.Class) string { return k.tag + "dead:" + c.String() }

// idem maps one (producer, idempotency key) to a message id for the window.
// Hashed so that any producer or key text gives a bounded, unambiguous name.
func (k keys) idem(producer, key string) string {
	h := sha256.New()
	h.Write([]byte(producer))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return k.tag + "idem:" + hex.EncodeToString(h.Sum(nil)[:16])
}

// pid maps a provider message id to our message id, for receipts that
// carry no reference: one STRING per sent message, written by releases
// before the provider-id index (pidIndex); still read until they expire
// (with their message's retention). Hashed so that any vendor id gives a
// bounded name.
func (k keys) pid(providerID string) string {
	h := sha256.Sum256([]byte(providerID))
	return k.tag + "pid:" + hex.EncodeToString(h[:16])
}

// The provider-id index: a sent message's provider id is a field of one of
// pidShards small HASHes of the hour it was sent in (its generation), so
// that Redis keeps each in its compact listpack encoding (up to
// hash-max-listpack-entries, 128 by default: pidShards is chosen so that
// an hour at 100 sends a second puts ~88 in each) at about 12 bytes an
// entry, instead of a key of ~200 bytes per message. A generation's
// HASHes expire Retention + pidGeneration after their last write, so no
// entry needs pruning; a lookup reads every generation the retention
// spans, newest first.
const (
	pidGeneration = time.Hour
	pidShards     = 4096
)

// pidEntry is where providerID's index entry lives: its shard and its
// field (6 bytes of its SHA-256: with the 12 bits of the shard, 60 bits
// tell apart the ~100 ids of one HASH).
func pidEntry(providerID string) (shard int, field string) {
	h := sha256.Sum256([]byte(providerID))
	return int(h[0])<<4 | int(h[1]>>4), string(h[2:8])
}

// pidIndex is the HASH of generation gen (hours since the epoch) that
// holds the entries of shard.
func (k keys) pidIndex(gen int64, shard int) string {
	return k.tag + "px:" + strconv.FormatInt(gen, 36) + ":" + strconv.FormatInt(int64(shard), 36)
}

// pidIndexEntry is the index HASH, field and value that record the
// provider id of a message created at created and sent now: the value is
// the creation second, after the generation's start (its final LIST).
func (k keys) pidIndexEntry(providerID string, created, now time.Time) (key, field string, value int64) {
	gen := pidGen(now)
	shard, field := pidEntry(providerID)
	return k.pidIndex(gen, shard), field, created.Unix() - gen*int64(pidGeneration/time.Second)
}

// pidGen is the generation of the index at t.
func pidGen(t time.Time) int64 { return t.Unix() / int64(pidGeneration/time.Second) }

// perClass returns f(c) for every class in sms.Classes order.
func (k keys) perClass(f func(sms.Class) string) []string {
	out := make([]string, len(sms.Classes))
	for i, c := range sms.Classes {
		out[i] = f(c)
	}
	return out
}

// The outbox of status events (outbox.go). Event ids are "evt_" + the
// message id's time and randomness + "_" + cbSeq.

// cbEvents is the HASH event id -> event record (outbox.go).
func (k keys) cbEvents() string { return k.tag + "cb:ev" }

// cbDue is the ZSET of undelivered events scored by when they may be
// claimed, µs: due time, or lease expiry while claimed.
func (k keys) cbDue() string { return k.tag + "cb:due" }

// cbAge is the ZSET of undelivered events scored by creation µs, for the
// backlog and its oldest age.
func (k keys) cbAge() string { return k.tag + "cb:age" }

// cbDead is the ZSET of dead events scored by time of death µs.
func (k keys) cbDead() string { return k.tag + "cb:dead" }

// cbSeq is the counter that makes event ids unique.
func (k keys) cbSeq() string { return k.tag + "cb:seq" }

// outbox is the keys every transition that writes an event passes, in the
// order luasrc.Outbox's outbox_add expects them.
func (k keys) outbox() []string { return []string{k.cbEvents(), k.cbDue(), k.cbAge(), k.cbSeq()} }
