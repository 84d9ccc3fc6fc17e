package redisq

import (
	"context"
	"fmt"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/queue/redisq/lanes"
)

// HoldLane holds lane in every class until now+until; see
// queue.LaneHolder.
func (q *Queue) HoldLane(ctx context.Context, lane string, until time.Duration) (err error) {
	if err := q.begin(ctx, "hold lane"); err != nil || until <= 0 {
		return err
	}
	start := time.Now()
	defer func() { q.m.observe("requeue", start, err) }()
	if err := lanes.Hold(ctx, q.c, q.k.perClass(q.k.ready), lane, us(until)); err != nil {
		return fmt.Errorf("redisq: hold lane: %w", err)
	}
	return nil
}

// Lanes reads every lane's backlog in one script; see queue.LaneReader.
func (q *Queue) Lanes(ctx context.Context) (_ []queue.LaneStats, err error) {
	if err := q.begin(ctx, "lanes"); err != nil {
		return nil, err
	}
	start := time.Now()
	defer func() { q.m.observe("read", start, err) }()
	return lanes.Read(ctx, q.c, q.k.perClass(q.k.ready), decodeStored)
}

var _ interface {
	queue.LaneHolder
	queue.LaneReader
} = (*Queue)(nil)
