package redisq

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/sms"
)

// Wake-ups (queue.Notifier). Every enqueue publishes the classes it made
// ready on the account's channel, in the same round trip as its script;
// every replica listens, so an idle replica takes a message enqueued
// elsewhere at once instead of finding it at its next poll. On Redis 7 and
// later the channel is sharded (SPUBLISH, SSUBSCRIBE): on a Cluster it
// lives on the shard of the account's slot, like the keys, instead of
// being broadcast to every node. An older Redis gets plain PUBLISH and
// SUBSCRIBE; the queue learns which from the first answer that refuses the
// sharded command.

// listenRetryMin and listenRetryMax bound how fast a listener whose
// connection fails tries again.
const (
	listenRetryMin = 100 * time.Millisecond
	listenRetryMax = 2 * time.Second
)

// wake is the channel of the account's wake-ups (a channel, not a key; it
// carries the account's hash tag so that it shares the keys' slot).
func (k keys) wake() string { return k.tag + "wake" }

// wakePayload names classes as the listener parses them: "otp,marketing".
func wakePayload(classes []sms.Class) string {
	names := make([]string, len(classes))
	for i, c := range classes {
		names[i] = c.String()
	}
	return strings.Join(names, ",")
}

// publish queues the wake-up of classes on p (a pipeline or the client).
func (q *Queue) publish(ctx context.Context, p redis.Cmdable, classes []sms.Class) *redis.IntCmd {
	if q.unsharded.Load() {
		return p.Publish(ctx, q.k.wake(), wakePayload(classes))
	}
	return p.SPublish(ctx, q.k.wake(), wakePayload(classes))
}

// announce publishes a wake-up on its own; a failure is only logged at
// debug: the listeners' polls find the messages anyway.
func (q *Queue) announce(ctx context.Context, classes []sms.Class) {
	q.published(q.publish(ctx, q.c, classes).Err())
}

// published records the answer to a wake-up: a Redis without sharded
// channels switches this queue to plain ones.
func (q *Queue) published(err error) {
	switch {
	case err == nil:
	case unknownCommand(err):
		q.unsharded.Store(true)
	default:
		q.log.Debug("wake-up not published", "err", err)
	}
}

func unknownCommand(err error) bool {
	return err != nil && strings.Contains(strings.ToLower(err.Error()), "unknown command")
}

// Listen implements queue.Notifier.
func (q *Queue) Listen(ctx context.Context, wake func(sms.Class)) {
	for ctx.Err() == nil {
		q.listen(ctx, wake)
	}
}

// listen subscribes once (sharded or not) and delivers until ctx ends or
// the server refuses the sharded subscription.
func (q *Queue) listen(ctx context.Context, wake func(sms.Class)) {
	sharded := !q.unsharded.Load()
	var ps *redis.PubSub
	if sharded {
		ps = q.c.SSubscribe(ctx, q.k.wake())
	} else {
		ps = q.c.Subscribe(ctx, q.k.wake())
	}
	defer func() { _ = ps.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() }) // unblocks Receive
	defer stop()
	retry := listenRetryMin
	for {
		msg, err := ps.Receive(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case sharded && unknownCommand(err):
			q.unsharded.Store(true)
			return
		case err != nil:
			// The next Receive reconnects and subscribes again.
			if !errors.Is(err, redis.ErrClosed) {
				q.log.Debug("wake-up listener: receive failed", "err", err)
			}
			t := time.NewTimer(retry)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			retry = min(retry*2, listenRetryMax)
			continue
		}
		retry = listenRetryMin
		switch m := msg.(type) {
		case *redis.Subscription:
			for _, c := range sms.Classes {
				wake(c) // (re)subscribed: news may have been missed
			}
		case *redis.Message:
			for _, name := range strings.Split(m.Payload, ",") {
				if c, err := sms.ParseClass(name); err == nil {
					wake(c)
				}
			}
		}
	}
}
