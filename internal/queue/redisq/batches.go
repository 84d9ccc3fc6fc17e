package redisq

import (
	"context"
	"fmt"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

var _ queue.Batches = (*Queue)(nil)

// batchArgs appends the batch index arguments of m to an enqueue script
// run (enqueueScript: its batch's SET and how long to keep it, ms; 0 and
// 0 for a message of no batch).
func (c *scriptCall) batchArgs(q *Queue, m *sms.Message, now time.Time) {
	if m.BatchID == "" {
		c.args = append(c.args, 0, 0)
		return
	}
	c.args = append(c.args, c.index(q.k.batch(m.Producer, m.BatchID)), queue.BatchKeep(m, now, q.retention).Milliseconds())
}

// BatchMessages returns the ids of producer's messages of batch; see
// queue.Batches.
func (q *Queue) BatchMessages(ctx context.Context, producer, batch string) ([]string, error) {
	if err := q.begin(ctx, "batch"); err != nil {
		return nil, err
	}
	ids, err := q.c.SMembers(ctx, q.k.batch(producer, batch)).Result()
	if err == nil && len(ids) == 0 {
		err = queue.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("redisq: batch %s: %w", batch, err)
	}
	return ids, nil
}
