package embedded

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// bBatch is the index of batches (queue.Batches): batch id, producer and
// message id, each but the last ended by a zero byte → nil. Keys sort by
// the batch's creation time (its id), so pruning walks them from the
// oldest, as it walks bFinal.
var bBatch = []byte("batch")

var _ queue.Batches = (*Queue)(nil)

// batchPrefix is the start of every key of producer's batch id.
func batchPrefix(batch, producer string) []byte {
	return []byte(batch + "\x00" + producer + "\x00")
}

// putBatch adds message m, just stored, to its batch's index, in the
// transaction that stores it.
func putBatch(tx *bolt.Tx, m *sms.Message) error {
	if m.BatchID == "" {
		return nil
	}
	return tx.Bucket(bBatch).Put(append(batchPrefix(m.BatchID, m.Producer), m.ID...), nil)
}

// BatchMessages returns producer's messages of batch, read in one
// transaction; see queue.Batches.
func (q *Queue) BatchMessages(ctx context.Context, producer, batch string) ([]*sms.Message, error) {
	var ms []*sms.Message
	prefix := batchPrefix(batch, producer)
	err := q.view(ctx, func(tx *bolt.Tx) error {
		ms = ms[:0]
		c := tx.Bucket(bBatch).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			m, err := getMessage(tx, string(k[len(prefix):]))
			if err != nil {
				return err
			}
			if m != nil {
				ms = append(ms, m)
			}
		}
		return nil
	})
	if err == nil && len(ms) == 0 {
		err = queue.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("queue: batch %s: %w", batch, err)
	}
	return ms, nil
}

// pruneBatches deletes up to one chunk of index entries whose message is
// gone (past its retention), looking only at batches created longer than
// the retention ago: it walks bBatch from where the last call stopped and
// returns to the start at the first younger batch. The walk is a read; a
// write transaction runs only when there is something to delete.
func (q *Queue) pruneBatches(ctx context.Context) error {
	q.pruneMu.Lock()
	defer q.pruneMu.Unlock()
	cutoff := q.now().Add(-q.retention)
	var stale [][]byte
	err := q.view(ctx, func(tx *bolt.Tx) error {
		c := tx.Bucket(bBatch).Cursor()
		k, _ := c.Seek(q.batchFrom)
		for seen := 0; seen < chunk && k != nil; seen++ {
			if created, ok := sms.BatchTime(string(k[:min(len(k), 30)])); ok && created.After(cutoff) {
				k = nil
				break
			}
			if i := bytes.LastIndexByte(k, 0); i < 0 || !storedID(tx, string(k[i+1:])) {
				stale = append(stale, append([]byte(nil), k...))
			}
			k, _ = c.Next()
		}
		q.batchFrom = append([]byte(nil), k...)
		return nil
	})
	if err != nil || len(stale) == 0 {
		return err
	}
	return q.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bBatch)
		for _, k := range stale {
			if i := bytes.LastIndexByte(k, 0); i >= 0 && storedID(tx, string(k[i+1:])) {
				continue
			}
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}
