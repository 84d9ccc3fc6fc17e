package embedded

import (
	"bytes"
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// bShelf holds the messages set aside by a producer pause: key producer,
// 0, readyKey (the place in line it was taken from) → id. A shelved
// message stays counted as queued (Stats shows it ready), so that Cancel
// needs nothing of its own: it ends the message, and Restore drops the
// shelf's key.
var bShelf = []byte("shelf")

var _ queue.Shelver = (*Queue)(nil)

func shelfPrefix(producer string) []byte { return append([]byte(producer), 0) }

// SetAside ends l's lease and shelves the message while sh.Held holds,
// asked inside the transaction; see queue.Shelver.
func (q *Queue) SetAside(ctx context.Context, l *queue.Leased, sh queue.Shelf) error {
	return q.ack(ctx, "set aside", l, func(tx *bolt.Tx, r *entry, now time.Time) error {
		if err := endLease(tx, r); err != nil {
			return err
		}
		r.Msg.Status = sms.StatusQueued
		r.Msg.UpdatedAt = now
		if sh.Held == nil || !sh.Held() {
			if err := putReady(tx, r); err != nil {
				return err
			}
			return putEntry(tx, r)
		}
		b, err := tx.CreateBucketIfNotExists(bShelf)
		if err != nil {
			return err
		}
		k := append(shelfPrefix(r.Msg.Producer), readyKey(r.Msg.Class, r.Due, r.Seq)...)
		if err := b.Put(k, []byte(r.Msg.ID)); err != nil {
			return err
		}
		if err := addClass(tx, r.Msg.Class, kindQueued, 1); err != nil {
			return err
		}
		return putEntry(tx, r)
	})
}

// Restore moves up to max of producer's shelved messages back to their
// places in line; see queue.Shelver.
func (q *Queue) Restore(ctx context.Context, producer string, max int) (int, error) {
	max = min(max, queue.MaxRestore)
	taken := 0
	err := q.update(ctx, func(tx *bolt.Tx) error {
		taken = 0
		b := tx.Bucket(bShelf)
		if b == nil {
			return nil
		}
		prefix := shelfPrefix(producer)
		var keys [][]byte
		c := b.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(keys) < max; k, _ = c.Next() {
			keys = append(keys, bytes.Clone(k))
		}
		taken = len(keys)
		for _, k := range keys {
			id := string(b.Get(k))
			if err := b.Delete(k); err != nil {
				return err
			}
			r, err := getEntry(tx, id)
			if err != nil {
				return err
			}
			rk := k[len(prefix):]
			if r == nil || r.Msg.Status != sms.StatusQueued || !bytes.Equal(rk, readyKey(r.Msg.Class, r.Due, r.Seq)) {
				continue // canceled (or moved on) while shelved
			}
			// Still counted as queued: back into the ready index only.
			if err := putLane(tx, r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("queue: restore: %w", err)
	}
	return taken, nil
}
