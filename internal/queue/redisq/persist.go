package redisq

import (
	"context"
	"fmt"

	"smsgw/internal/queue/redisq/persistence"
)

// CheckPersistence reports whether Redis writes an append-only file, so
// that queued messages survive a Redis restart. On a cluster every master
// must. It logs a loud warning when they do not; the gateway calls it once at
// start-up. Where CONFIG is disabled (managed Redis) it reads INFO persistence.
func (q *Queue) CheckPersistence(ctx context.Context) (bool, error) {
	if err := q.begin(ctx, "check persistence"); err != nil {
		return false, err
	}
	aof, err := persistence.Check(ctx, q.c, q.log)
	if err != nil {
		return false, fmt.Errorf("redisq: %w", err)
	}
	return aof, nil
}
