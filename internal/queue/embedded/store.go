package embedded

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

var (
	bMsgs   = []byte("msgs")
	bReady  = []byte("ready")
	bLeases = []byte("leases")
	bIdem   = []byte("idem")
	bOut    = []byte("out")
	bDead   = []byte("dead")
	bDone   = []byte("done")
	bCounts = []byte("counts")
	// bFinal holds the final records (queue.EncodeFinal) of completed
	// messages, keyed by the id without "msg_": the keys sort by creation
	// time, so pruning walks them from the oldest without an index.
	bFinal = []byte("final")
	// bPids maps a sent message's provider id to its id, for receipts
	// without a reference; pruned with the message.
	bPids = []byte("pids")
	// bEarly keeps a receipt for a message not stored yet, named by a
	// reference created within queue.EarlyReceiptWindow (an OTP of the
	// fast path: RecordSent applies it), keyed like bFinal so pruning
	// walks it from the oldest: status, then the error code.
	bEarly = []byte("early")

	// The outbox of status events (outbox.go).
	bCbEvents = []byte("cbev")   // event id → event record
	bCbDue    = []byte("cbdue")  // due(8) id → nil: claimable at due (lease expiry while claimed)
	bCbAge    = []byte("cbage")  // created(8) id → nil: undelivered events, oldest first
	bCbDead   = []byte("cbdead") // at(8) id → nil: dead events, oldest first
)

// Kinds of per-class counters. Ready and scheduled are one counter because
// the split moves with the clock; Stats counts the scheduled tail.
const (
	kindQueued byte = 'q'
	kindLeased byte = 'l'
	kindDead   byte = 'd'
)

func createBuckets(tx *bolt.Tx) error {
	for _, name := range append([][]byte{bMsgs, bReady, bLeases, bIdem, bOut, bDead, bDone, bCounts, bFinal, bPids, bEarly, bCbEvents, bCbDue, bCbAge, bCbDead, bBatch}, append(replyBuckets, laneBuckets...)...) {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("bucket %s: %w", name, err)
		}
	}
	return nil
}

// ms is t in Unix milliseconds, never negative so keys sort.
func ms(t time.Time) int64 { return max(t.UnixMilli(), 0) }

// msCeil rounds up, so that a message is never due before its NotBefore.
func msCeil(t time.Time) int64 {
	m := ms(t)
	if time.UnixMilli(m).Before(t) {
		m++
	}
	return m
}

func durMs(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func u64(v int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(v))
	return b
}

func readyKey(c sms.Class, due int64, seq uint64) []byte {
	k := make([]byte, 17)
	k[0] = byte(c)
	binary.BigEndian.PutUint64(k[1:], uint64(due))
	binary.BigEndian.PutUint64(k[9:], seq)
	return k
}

func keyDue(k []byte) int64 { return int64(binary.BigEndian.Uint64(k[1:9])) }

// timeKey is at(8) id: the leases, dead and done indexes.
func timeKey(at int64, id string) []byte {
	k := make([]byte, 8+len(id))
	binary.BigEndian.PutUint64(k, uint64(at))
	copy(k[8:], id)
	return k
}

func timeKeyAt(k []byte) int64               { return int64(binary.BigEndian.Uint64(k[:8])) }
func timeKeyID(k []byte) string              { return string(k[8:]) }
func countKey(c sms.Class, kind byte) []byte { return []byte{byte(c), kind} }

// idemKey is length-prefixed so that no (producer, key) pair can collide with
// another whatever bytes either holds.
func idemKey(producer, key string) []byte {
	k := binary.AppendUvarint(nil, uint64(len(producer)))
	k = append(k, producer...)
	return append(k, key...)
}

// getEntry reads the message id with its bookkeeping; nil if not stored.
func getEntry(tx *bolt.Tx, id string) (*entry, error) {
	v := tx.Bucket(bMsgs).Get([]byte(id))
	if v == nil {
		return nil, nil
	}
	e, err := decodeEntry(id, v)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", id, err)
	}
	return e, nil
}

// finalKey is id's key in bFinal.
func finalKey(id string) []byte { return []byte(strings.TrimPrefix(id, "msg_")) }

// getMessage reads message id: its entry, else its final record; nil if
// neither is stored.
func getMessage(tx *bolt.Tx, id string) (*sms.Message, error) {
	e, err := getEntry(tx, id)
	if err != nil || e != nil {
		if e == nil {
			return nil, err
		}
		return &e.Msg, nil
	}
	if !sms.ValidID(id) {
		return nil, nil
	}
	v := tx.Bucket(bFinal).Get(finalKey(id))
	if v == nil {
		return nil, nil
	}
	return queue.DecodeFinal(id, string(v))
}

// putEntry stores e as a record and leaves e as a later getEntry returns it
// (times to the ms), so that what a call hands back is what is stored.
func putEntry(tx *bolt.Tx, e *entry) error {
	v, stored, err := encodeEntry(e)
	if err != nil {
		return err
	}
	*e = *stored
	return tx.Bucket(bMsgs).Put([]byte(e.Msg.ID), v)
}

func getCount(b *bolt.Bucket, k []byte) int64 {
	v := b.Get(k)
	if len(v) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

// addCount adjusts a counter, deleting it at zero so that idle producers
// leave nothing behind.
func addCount(b *bolt.Bucket, k []byte, delta int64) error {
	n := getCount(b, k) + delta
	if n <= 0 {
		return b.Delete(k)
	}
	return b.Put(k, u64(n))
}

func addClass(tx *bolt.Tx, c sms.Class, kind byte, delta int64) error {
	return addCount(tx.Bucket(bCounts), countKey(c, kind), delta)
}

func addOut(tx *bolt.Tx, producer string, delta int64) error {
	return addCount(tx.Bucket(bOut), []byte(producer), delta)
}

// putReady puts r into its lane (lanes.go) at its due time.
func putReady(tx *bolt.Tx, r *entry) error {
	if err := putLane(tx, r); err != nil {
		return err
	}
	return addClass(tx, r.Msg.Class, kindQueued, 1)
}

// endLease removes r's lease; the caller moves r on.
func endLease(tx *bolt.Tx, r *entry) error {
	if err := tx.Bucket(bLeases).Delete(timeKey(r.Lease, r.Msg.ID)); err != nil {
		return err
	}
	r.Token, r.Lease, r.Owner = "", 0, ""
	return addClass(tx, r.Msg.Class, kindLeased, -1)
}

// finalize ends message r in its final status, as Complete and Cancel do:
// its event (r.Msg.Status, with the event's error code) is written while
// the full record is at hand, then the message leaves msgs for its final
// record (queue.EncodeFinal: no body, no full number) and its producer's
// outstanding count drops. It returns the final record written.
func finalize(tx *bolt.Tx, r *entry, code string, now int64) (string, error) {
	v, err := queue.EncodeFinal(&r.Msg)
	if err != nil {
		return "", err
	}
	if err := addEvent(tx, &r.Msg, r.Msg.Status, code, now); err != nil {
		return "", err
	}
	if err := refundBudget(tx, &r.Msg); err != nil { // budget.go
		return "", err
	}
	if err := tx.Bucket(bMsgs).Delete([]byte(r.Msg.ID)); err != nil {
		return "", err
	}
	if err := tx.Bucket(bFinal).Put(finalKey(r.Msg.ID), []byte(v)); err != nil {
		return "", err
	}
	return v, addOut(tx, r.Msg.Producer, -1)
}

// storedID reports whether id is stored, live or final.
func storedID(tx *bolt.Tx, id string) bool {
	return tx.Bucket(bMsgs).Get([]byte(id)) != nil || tx.Bucket(bFinal).Get(finalKey(id)) != nil
}

// indexProviderID maps a sent message's provider id to its id, for
// receipts without a reference; an id longer than a receipt field is not
// indexed (no receipt can name it).
func indexProviderID(tx *bolt.Tx, providerID, id string) error {
	if providerID == "" || len(providerID) > queue.MaxReceiptField {
		return nil
	}
	return tx.Bucket(bPids).Put([]byte(providerID), []byte(id))
}

// finish makes r terminal at now: it leaves the producer's outstanding count
// and enters the retention index.
func finish(tx *bolt.Tx, r *entry, now int64) error {
	r.At = now
	if err := tx.Bucket(bDone).Put(timeKey(now, r.Msg.ID), nil); err != nil {
		return err
	}
	return addOut(tx, r.Msg.Producer, -1)
}
