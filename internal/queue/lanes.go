package queue

import (
	"context"
	"time"

	"smsgw/internal/sms"
)

// LaneOf is the sender lane of m: its sender (From), "" for the
// provider's default sender. Each class's ready messages are split by
// lane; a take considers only the lanes that are not held and takes the
// oldest due message among them, so a held sender's backlog costs the
// other senders nothing, however long it is. Within a lane, a class's
// messages keep their order.
func LaneOf(m *sms.Message) string { return m.From }

// LaneHolder is implemented by a backend that holds sender lanes.
type LaneHolder interface {
	// HoldLane holds lane (LaneOf) in every class until now+until: a take
	// hands out none of its messages before then. A hold never shortens
	// one in force. The send loop holds a sender's lane when the limiter
	// refuses a reservation for that sender alone, or the sender is
	// paused, and puts the refused message back at its place
	// (RequeueOptions.KeepPlace), so that the lane keeps its order.
	HoldLane(ctx context.Context, lane string, until time.Duration) error
}

// LaneStats is the backlog of one sender lane across the classes.
type LaneStats struct {
	Lane string // the sender ("" the provider's default one)
	// Queued is the lane's queued messages by class (due now or
	// scheduled; not those set aside on a producer's shelf).
	Queued map[sms.Class]int64
	// OldestAge is how long the lane's oldest due message has been due
	// (0: none due).
	OldestAge time.Duration
	// HeldFor is how long the lane's hold still holds (0: none).
	HeldFor time.Duration
}

// LaneReader is implemented by a backend that reads its lanes' backlog.
type LaneReader interface {
	// Lanes returns the lanes that have queued messages, in no set order.
	// A lane's name comes from the messages themselves; a backend whose
	// keys keep only a digest of the sender (redisq) names a lane by one
	// of its messages. Its cost grows with the number of lanes, not with
	// their backlog.
	Lanes(ctx context.Context) ([]LaneStats, error)
}
