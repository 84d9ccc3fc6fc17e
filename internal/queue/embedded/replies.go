package embedded

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"smsgw/internal/queue"
)

// Replies (queue.Routes): the routes of (sender, recipient) pairs and the
// memory of replies written, each with an index by time that pruneReplies
// walks from the oldest, so both are bounded by what one retention (one
// queue.ReplyMemory) writes.
var (
	bRoutes    = []byte("rt")     // route key → written(8) producer
	bRouteAge  = []byte("rtage")  // written(8) route key → nil
	bReplySeen = []byte("rcv")    // reply id → written(8)
	bReplyAge  = []byte("rcvage") // written(8) reply id → nil
)

// replyBuckets are created with the store's others (createBuckets).
var replyBuckets = [][]byte{bRoutes, bRouteAge, bReplySeen, bReplyAge}

// RememberRoute implements queue.Routes.
func (q *Queue) RememberRoute(ctx context.Context, key, producer string) error {
	if err := queue.CheckRouteKey(key); err != nil || producer == "" {
		return fmt.Errorf("queue: remember route: %w", queue.ErrReplyInvalid)
	}
	return q.update(ctx, func(tx *bolt.Tx) error {
		b, age := tx.Bucket(bRoutes), tx.Bucket(bRouteAge)
		if old := b.Get([]byte(key)); len(old) >= 8 {
			if err := age.Delete(timeKey(int64(binary.BigEndian.Uint64(old[:8])), key)); err != nil {
				return err
			}
		}
		now := ms(q.now())
		if err := b.Put([]byte(key), append(u64(now), producer...)); err != nil {
			return err
		}
		return age.Put(timeKey(now, key), nil)
	})
}

// Route implements queue.Routes.
func (q *Queue) Route(ctx context.Context, keys []string) (string, int, error) {
	for _, k := range keys {
		if err := queue.CheckRouteKey(k); err != nil {
			return "", -1, fmt.Errorf("queue: route: %w", err)
		}
	}
	producer, index := "", -1
	cutoff := ms(q.now().Add(-q.retention))
	err := q.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bRoutes)
		for i, k := range keys {
			if v := b.Get([]byte(k)); len(v) > 8 && int64(binary.BigEndian.Uint64(v[:8])) > cutoff {
				producer, index = string(v[8:]), i
				return nil
			}
		}
		return nil
	})
	return producer, index, err
}

// AddReply implements queue.Routes.
func (q *Queue) AddReply(ctx context.Context, producer string, r queue.Reply) (bool, error) {
	if err := queue.CheckReply(producer, r); err != nil {
		return false, fmt.Errorf("queue: add reply: %w", err)
	}
	var added bool
	err := q.update(ctx, func(tx *bolt.Tx) error {
		added = false
		seen := tx.Bucket(bReplySeen)
		now := ms(q.now())
		if v := seen.Get([]byte(r.ID)); len(v) == 8 && int64(binary.BigEndian.Uint64(v)) > now-queue.ReplyMemory.Milliseconds() {
			return nil
		} else if len(v) == 8 {
			if err := tx.Bucket(bReplyAge).Delete(timeKey(int64(binary.BigEndian.Uint64(v)), r.ID)); err != nil {
				return err
			}
		}
		if err := seen.Put([]byte(r.ID), u64(now)); err != nil {
			return err
		}
		if err := tx.Bucket(bReplyAge).Put(timeKey(now, r.ID), nil); err != nil {
			return err
		}
		id := queue.ReplyEventID(r.ID)
		e := eventRecord{Kind: replyKind, Message: r.ID, Producer: producer, Status: string(queue.StatusReceived),
			From: r.From, To: r.To, Text: r.Text, At: ms(r.At), AgeFrom: now, Due: now}
		added = true
		return putNewEvent(tx, id, &e, now)
	})
	return added, err
}

// replyKind is eventRecord.Kind of a reply's event.
const replyKind = "r"

// replyEvent is the event of a stored reply record.
func (r *eventRecord) replyEvent(id string) *queue.Event {
	return &queue.Event{
		ID: id, MessageID: r.Message, Producer: r.Producer, Status: queue.StatusReceived, At: queue.FromMs(r.At),
		Reply:    &queue.Reply{ID: r.Message, From: r.From, To: r.To, Text: r.Text, At: queue.FromMs(r.At)},
		Attempts: r.Attempts, LastError: r.LastError, Dead: r.Dead, DeadAt: queue.FromMs(r.DeadAt),
	}
}

// pruneReplies deletes up to a chunk each of the routes older than the
// retention and of the reply ids older than queue.ReplyMemory.
func (q *Queue) pruneReplies(ctx context.Context) error {
	now := q.now()
	routes, err := q.staleByAge(ctx, bRouteAge, ms(now.Add(-q.retention)))
	if err != nil {
		return err
	}
	seen, err := q.staleByAge(ctx, bReplyAge, ms(now.Add(-queue.ReplyMemory)))
	if err != nil || len(routes)+len(seen) == 0 {
		return err
	}
	return q.update(ctx, func(tx *bolt.Tx) error {
		for _, pair := range []struct {
			stale      [][]byte
			items, age []byte
		}{{routes, bRoutes, bRouteAge}, {seen, bReplySeen, bReplyAge}} {
			items, age := tx.Bucket(pair.items), tx.Bucket(pair.age)
			for _, k := range pair.stale {
				id := []byte(timeKeyID(k))
				// a later write moved the item's index entry: keep the item
				if v := items.Get(id); len(v) >= 8 && int64(binary.BigEndian.Uint64(v[:8])) == timeKeyAt(k) {
					if err := items.Delete(id); err != nil {
						return err
					}
				}
				if err := age.Delete(k); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// staleByAge is up to a chunk of the index entries of bucket age written
// at or before cutoff ms.
func (q *Queue) staleByAge(ctx context.Context, age []byte, cutoff int64) ([][]byte, error) {
	var stale [][]byte
	err := q.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(age)
		if b == nil {
			return errors.New("bucket " + string(age) + " missing")
		}
		c := b.Cursor()
		for k, _ := c.First(); k != nil && len(stale) < chunk && timeKeyAt(k) <= cutoff; k, _ = c.Next() {
			stale = append(stale, append([]byte(nil), k...))
		}
		return nil
	})
	return stale, err
}
