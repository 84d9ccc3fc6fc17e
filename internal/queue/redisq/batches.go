package redisq

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/queue/redisq/luasrc"
	"smsgw/internal/sms"
)

var _ queue.Batches = (*Queue)(nil)

// The batch arguments of enqueueScript come after the budget's: batchArg
// is the offset of the first from a message's first argument.
const (
	batchArg            = 21 + budgetArgsPerMessage
	batchArgsPerMessage = 2
)

// batchArgs appends the batch index arguments of m to an enqueue script
// run (enqueueScript: its batch's LIST and how long to keep it, ms; 0 and
// 0 for a message of no batch).
func (c *scriptCall) batchArgs(q *Queue, m *sms.Message, now time.Time) {
	if m.BatchID == "" {
		c.args = append(c.args, 0, 0)
		return
	}
	c.args = append(c.args, c.index(q.k.batch(m.Producer, m.BatchID)), queue.BatchKeep(m, now, q.retention).Milliseconds())
}

// batchReadScript reads many messages as getScript reads one, each final
// LIST once (fin_index) rather than once per message: a batch's messages
// share a few creation seconds.
//
// KEYS[1] msgs HASH, KEYS[2..] final LISTs. ARGV: per message its id and
// the index in KEYS of its final LIST.
// Returns per message {1, stored value}, {2, final record} or {0}: not in
// msgs nor in its LIST (its second's blob, or gone).
var batchReadScript = redis.NewScript(luasrc.Prelude + `
local fins = {}
local out = {}
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  local v = redis.call('HGET', KEYS[1], id)
  if v then
    out[#out + 1] = {1, v}
  else
    local f = fin_index(fins, KEYS[tonumber(ARGV[i + 1])])[id]
    if f then out[#out + 1] = {2, f} else out[#out + 1] = {0} end
  end
end
return out
`)

// BatchMessages returns producer's messages of batch; see queue.Batches.
// It costs two round trips per 1,000 messages, and one more per creation
// second of them whose final records are compacted.
func (q *Queue) BatchMessages(ctx context.Context, producer, batch string) (_ []*sms.Message, err error) {
	if err := q.begin(ctx, "batch"); err != nil {
		return nil, err
	}
	start := time.Now()
	defer func() { q.m.observe("read", start, err) }()
	ids, err := q.c.LRange(ctx, q.k.batch(producer, batch), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("redisq: batch %s: %w", batch, err)
	}
	var out []*sms.Message
	blobs := map[int64]string{} // creation second -> its blob ("" none)
	for lo := 0; lo < len(ids); lo += maxBatch {
		ms, err := q.readMany(ctx, ids[lo:min(lo+maxBatch, len(ids))], blobs)
		if err != nil {
			return nil, fmt.Errorf("redisq: batch %s: %w", batch, err)
		}
		out = append(out, ms...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("redisq: batch %s: %w", batch, queue.ErrNotFound)
	}
	return out, nil
}

// readMany reads the messages ids name (those still kept) in one script,
// then the blobs of the seconds whose records it did not find.
func (q *Queue) readMany(ctx context.Context, ids []string, blobs map[int64]string) ([]*sms.Message, error) {
	call := &scriptCall{keys: []string{q.k.msgs()}, keyIndex: map[string]int{}}
	for _, id := range ids {
		if !sms.ValidID(id) {
			return nil, fmt.Errorf("malformed id %q in the index", id)
		}
		call.args = append(call.args, id, call.index(q.k.fin(id)))
	}
	reply, err := batchReadScript.Run(ctx, q.c, call.keys, call.args...).Slice()
	if err != nil {
		return nil, err
	}
	if len(reply) != len(ids) {
		return nil, fmt.Errorf("%d replies for %d messages", len(reply), len(ids))
	}
	out := make([]*sms.Message, 0, len(ids))
	for i, r := range reply {
		one, _ := r.([]any)
		if len(one) == 0 {
			return nil, fmt.Errorf("unexpected reply %v", r)
		}
		if kind, _ := one[0].(int64); kind == 0 {
			if one, err = q.fromBlob(ctx, ids[i], blobs); err != nil || one == nil {
				if err != nil {
					return nil, err
				}
				continue // gone: past its retention
			}
		}
		m, err := decodeGet(ids[i], one)
		if err != nil {
			return nil, fmt.Errorf("message %s: %w", ids[i], err)
		}
		out = append(out, m)
	}
	return out, nil
}

// fromBlob is the getScript reply for id read from its second's blob
// (read once per second, kept in blobs), nil when there is none.
func (q *Queue) fromBlob(ctx context.Context, id string, blobs map[int64]string) ([]any, error) {
	created, _ := sms.IDTime(id)
	sec := created.Unix()
	blob, ok := blobs[sec]
	if !ok {
		var err error
		blob, err = q.c.Get(ctx, q.k.finBlob(sec)).Result()
		if err != nil && err != redis.Nil {
			return nil, err
		}
		blobs[sec] = blob
	}
	if blob == "" {
		return nil, nil
	}
	if _, found, err := blobRecord(blob, id); err != nil || !found {
		return nil, err
	}
	return []any{int64(3), blob}, nil
}
