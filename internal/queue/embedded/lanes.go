package embedded

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// Sender lanes (queue.LaneOf). The default sender's queued messages stay
// in bReady, as before lanes, so a store written by an earlier release is
// read as it is; every other sender's are in bLaneReady, and each class's
// lanes are in bLaneIdx scored by the later of the lane's head's due time
// and its hold, so that a take reads one index entry per class however
// long a held lane's backlog is. A lane's tag is 8 bytes of the SHA-256
// of its sender.
var (
	// bLaneReady is class(1) tag(8) due(8) seq(8) → id.
	bLaneReady = []byte("lready")
	// bLaneIdx is class(1) score(8) seq(8) tag(8) → nil: seq is the
	// head's, so that lanes of equal score leave in enqueue order.
	bLaneIdx = []byte("lidx")
	// bLaneMeta is class(1) tag(8) → score(8) seq(8) count(8): the
	// lane's entry in bLaneIdx and how many messages it holds.
	bLaneMeta = []byte("lmeta")
	// bLaneName is tag(8) → the sender, for Lanes.
	bLaneName = []byte("lname")
	// bLaneHold is tag(8) (defaultHold for the default lane) → held
	// until, ms.
	bLaneHold = []byte("lhold")
)

var laneBuckets = [][]byte{bLaneReady, bLaneIdx, bLaneMeta, bLaneName, bLaneHold}

// defaultHold is the default lane's key in bLaneHold.
var defaultHold = []byte{0}

// maxLaneHolds is how many holds bLaneHold keeps before a hold also drops
// the expired ones.
const maxLaneHolds = 256

// laneTag is the tag of lane; nil for the default lane.
func laneTag(lane string) []byte {
	if lane == "" {
		return nil
	}
	h := sha256.Sum256([]byte(lane))
	return h[:8]
}

func laneReadyKey(c sms.Class, tag []byte, due int64, seq uint64) []byte {
	k := make([]byte, 0, 25)
	k = append(k, byte(c))
	k = append(k, tag...)
	k = binary.BigEndian.AppendUint64(k, uint64(due))
	return binary.BigEndian.AppendUint64(k, seq)
}

func laneMetaKey(c sms.Class, tag []byte) []byte { return append([]byte{byte(c)}, tag...) }

func laneIdxKey(c sms.Class, score int64, seq []byte, tag []byte) []byte {
	k := binary.BigEndian.AppendUint64([]byte{byte(c)}, uint64(score))
	k = append(k, seq...)
	return append(k, tag...)
}

// holdOf is how long lane tag is held (ms; 0: never held).
func holdOf(tx *bolt.Tx, tag []byte) int64 {
	k := tag
	if k == nil {
		k = defaultHold
	}
	if v := tx.Bucket(bLaneHold).Get(k); len(v) == 8 {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

// laneMeta reads a lane's index entry and count.
func laneMeta(tx *bolt.Tx, c sms.Class, tag []byte) (idxKey []byte, count int64, ok bool) {
	v := tx.Bucket(bLaneMeta).Get(laneMetaKey(c, tag))
	if len(v) != 24 {
		return nil, 0, false
	}
	return laneIdxKey(c, int64(binary.BigEndian.Uint64(v[:8])), v[8:16], tag), int64(binary.BigEndian.Uint64(v[16:])), true
}

// rescore puts lane tag of class c into bLaneIdx at its score, with its
// count moved by delta, or out of it when it is empty.
func rescore(tx *bolt.Tx, c sms.Class, tag []byte, delta int64) error {
	idx, meta := tx.Bucket(bLaneIdx), tx.Bucket(bLaneMeta)
	old, count, ok := laneMeta(tx, c, tag)
	if ok {
		if err := idx.Delete(old); err != nil {
			return err
		}
	}
	prefix := laneMetaKey(c, tag)
	k, _ := tx.Bucket(bLaneReady).Cursor().Seek(prefix)
	if k == nil || !bytes.HasPrefix(k, prefix) {
		return meta.Delete(prefix)
	}
	score, seq := max(int64(binary.BigEndian.Uint64(k[9:17])), holdOf(tx, tag)), k[17:25]
	if err := idx.Put(laneIdxKey(c, score, seq, tag), nil); err != nil {
		return err
	}
	v := binary.BigEndian.AppendUint64(nil, uint64(score))
	v = append(v, seq...)
	return meta.Put(prefix, binary.BigEndian.AppendUint64(v, uint64(max(count+delta, 0))))
}

// putLane puts r into its lane at its due time (the class's count is the
// caller's).
func putLane(tx *bolt.Tx, r *entry) error {
	tag := laneTag(queue.LaneOf(&r.Msg))
	if tag == nil {
		return tx.Bucket(bReady).Put(readyKey(r.Msg.Class, r.Due, r.Seq), []byte(r.Msg.ID))
	}
	if err := tx.Bucket(bLaneReady).Put(laneReadyKey(r.Msg.Class, tag, r.Due, r.Seq), []byte(r.Msg.ID)); err != nil {
		return err
	}
	if n := tx.Bucket(bLaneName).Get(tag); n == nil {
		if err := tx.Bucket(bLaneName).Put(tag, []byte(r.Msg.From)); err != nil {
			return err
		}
	}
	return rescore(tx, r.Msg.Class, tag, 1)
}

// delLane takes queued r out of its lane (and out of bReady, where an
// earlier release put every message).
func delLane(tx *bolt.Tx, r *entry) error {
	if err := tx.Bucket(bReady).Delete(readyKey(r.Msg.Class, r.Due, r.Seq)); err != nil {
		return err
	}
	tag := laneTag(queue.LaneOf(&r.Msg))
	if tag == nil {
		return nil
	}
	b := tx.Bucket(bLaneReady)
	k := laneReadyKey(r.Msg.Class, tag, r.Due, r.Seq)
	if b.Get(k) == nil {
		return nil
	}
	if err := b.Delete(k); err != nil {
		return err
	}
	return rescore(tx, r.Msg.Class, tag, -1)
}

// readyAt is where a take found a message: its bucket, key and lane tag.
type readyAt struct {
	bucket []byte
	key    []byte
	tag    []byte
}

// classHead finds the oldest due message of class cl among its lanes not
// held at now, or else the time the class's next message is due in a lane
// not held (0: none queued).
func classHead(tx *bolt.Tx, cl sms.Class, now int64) (at *readyAt, next int64) {
	var due int64
	var seq []byte
	if k, _ := tx.Bucket(bReady).Cursor().Seek([]byte{byte(cl)}); k != nil && k[0] == byte(cl) {
		d := max(keyDue(k), holdOf(tx, nil))
		if d <= now {
			at, due, seq = &readyAt{bucket: bReady, key: bytes.Clone(k)}, keyDue(k), k[9:17]
		} else {
			next = d
		}
	}
	k, _ := tx.Bucket(bLaneIdx).Cursor().Seek([]byte{byte(cl)})
	if k == nil || k[0] != byte(cl) {
		return at, next
	}
	score := int64(binary.BigEndian.Uint64(k[1:9]))
	if score > now {
		if at == nil && (next == 0 || score < next) {
			next = score
		}
		return at, next
	}
	tag := bytes.Clone(k[17:])
	prefix := laneMetaKey(cl, tag)
	lk, _ := tx.Bucket(bLaneReady).Cursor().Seek(prefix)
	if lk == nil || !bytes.HasPrefix(lk, prefix) {
		return at, next // an index entry without its lane: rescore drops it
	}
	ld := int64(binary.BigEndian.Uint64(lk[9:17]))
	if at == nil || ld < due || (ld == due && bytes.Compare(lk[17:25], seq) < 0) {
		return &readyAt{bucket: bLaneReady, key: bytes.Clone(lk), tag: tag}, 0
	}
	return at, 0
}

// takeFrom takes the message at at out of its lane and returns its id.
func takeFrom(tx *bolt.Tx, at *readyAt, cl sms.Class) (string, error) {
	id := string(tx.Bucket(at.bucket).Get(at.key))
	if err := tx.Bucket(at.bucket).Delete(at.key); err != nil {
		return "", err
	}
	if at.tag != nil {
		if err := rescore(tx, cl, at.tag, -1); err != nil {
			return "", err
		}
	}
	return id, nil
}

// lanesOf is every lane tag of class cl other than the default one.
func lanesOf(tx *bolt.Tx, cl sms.Class) [][]byte {
	var out [][]byte
	c := tx.Bucket(bLaneMeta).Cursor()
	for k, _ := c.Seek([]byte{byte(cl)}); k != nil && k[0] == byte(cl); k, _ = c.Next() {
		out = append(out, bytes.Clone(k[1:]))
	}
	return out
}

// laneTail calls f with the due time of each message of lane tag of class
// cl (nil: the default lane) due after from, in order, while f returns
// true.
func laneTail(tx *bolt.Tx, cl sms.Class, tag []byte, from int64, f func(due int64) bool) {
	if tag == nil {
		c := tx.Bucket(bReady).Cursor()
		for k, _ := c.Seek(readyKey(cl, from, 0)); k != nil && k[0] == byte(cl) && f(keyDue(k)); k, _ = c.Next() {
		}
		return
	}
	prefix := laneMetaKey(cl, tag)
	c := tx.Bucket(bLaneReady).Cursor()
	for k, _ := c.Seek(laneReadyKey(cl, tag, from, 0)); k != nil && bytes.HasPrefix(k, prefix) &&
		f(int64(binary.BigEndian.Uint64(k[9:17]))); k, _ = c.Next() {
	}
}

// laneHeadDue is the due time of the first message of lane tag of class
// cl (nil: the default lane), or false when it is empty.
func laneHeadDue(tx *bolt.Tx, cl sms.Class, tag []byte) (due int64, ok bool) {
	laneTail(tx, cl, tag, 0, func(d int64) bool { due, ok = d, true; return false })
	return due, ok
}

// HoldLane holds lane in every class until now+until, never shortening a
// longer hold; see queue.LaneHolder.
func (q *Queue) HoldLane(ctx context.Context, lane string, until time.Duration) error {
	if until <= 0 {
		return q.view(ctx, func(*bolt.Tx) error { return nil })
	}
	err := q.update(ctx, func(tx *bolt.Tx) error {
		now := ms(q.now())
		upto := now + durMs(until)
		tag := laneTag(lane)
		if holdOf(tx, tag) >= upto {
			return nil
		}
		b := tx.Bucket(bLaneHold)
		if b.Stats().KeyN >= maxLaneHolds {
			var expired [][]byte
			_ = b.ForEach(func(k, v []byte) error {
				if len(v) == 8 && int64(binary.BigEndian.Uint64(v)) <= now {
					expired = append(expired, bytes.Clone(k))
				}
				return nil
			})
			for _, k := range expired {
				if err := b.Delete(k); err != nil {
					return err
				}
			}
		}
		k := tag
		if k == nil {
			k = defaultHold
		}
		if err := b.Put(k, u64(upto)); err != nil {
			return err
		}
		if tag == nil {
			return nil
		}
		for _, cl := range sms.Classes {
			if _, _, ok := laneMeta(tx, cl, tag); ok {
				if err := rescore(tx, cl, tag, 0); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("queue: hold lane: %w", err)
	}
	return nil
}

var _ queue.LaneHolder = (*Queue)(nil)

// Lanes reads every lane's backlog: counts kept with the lanes (the
// default lane's is the class's queued count less the other lanes', so
// it holds the messages on shelves too); see queue.LaneReader.
func (q *Queue) Lanes(ctx context.Context) ([]queue.LaneStats, error) {
	var out []queue.LaneStats
	err := q.view(ctx, func(tx *bolt.Tx) error {
		out = out[:0]
		now := ms(q.now())
		byTag := map[string]int{}
		add := func(cl sms.Class, tag []byte, count int64) {
			if count <= 0 {
				return
			}
			i, ok := byTag[string(tag)]
			if !ok {
				i = len(out)
				byTag[string(tag)] = i
				ls := queue.LaneStats{Queued: map[sms.Class]int64{}}
				if tag != nil {
					ls.Lane = string(tx.Bucket(bLaneName).Get(tag))
				}
				if h := holdOf(tx, tag); h > now {
					ls.HeldFor = time.Duration(h-now) * time.Millisecond
				}
				out = append(out, ls)
			}
			out[i].Queued[cl] += count
			if d, ok := laneHeadDue(tx, cl, tag); ok && d <= now {
				out[i].OldestAge = max(out[i].OldestAge, time.Duration(now-d)*time.Millisecond)
			}
		}
		for _, cl := range sms.Classes {
			rest := getCount(tx.Bucket(bCounts), countKey(cl, kindQueued))
			for _, tag := range lanesOf(tx, cl) {
				_, n, _ := laneMeta(tx, cl, tag)
				rest -= n
				add(cl, tag, n)
			}
			add(cl, nil, rest)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: lanes: %w", err)
	}
	return out, nil
}

var _ queue.LaneReader = (*Queue)(nil)
