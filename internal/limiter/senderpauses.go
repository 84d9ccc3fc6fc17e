package limiter

import (
	"context"
	"fmt"
	"time"
)

// SenderPauses reads how long each of senders is still paused (0: not
// paused), in the order given, on Redis time: the pauses every replica
// shares. One script call for all of them.
func (r *Redis) SenderPauses(ctx context.Context, senders []string) ([]time.Duration, error) {
	if len(senders) == 0 {
		return nil, nil
	}
	keys := make([]string, len(senders))
	for i, s := range senders {
		keys[i] = r.keys.senderPause(s)
		if k, ok := r.senders[s]; ok {
			keys[i] = k.pause
		}
	}
	res, err := stateScript.Run(ctx, r.client, keys).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("limiter: sender pauses on redis: %w", err)
	}
	if len(res) != len(keys)+1 {
		return nil, fmt.Errorf("limiter: sender pauses on redis: unexpected answer %v", res)
	}
	now := res[0]
	r.observe(now)
	out := make([]time.Duration, len(senders))
	for i := range senders {
		out[i] = micros(max(0, res[1+i]-now))
	}
	return out, nil
}

// SenderPauses reads how long each of senders is still paused in this
// process (0: not paused), in the order given.
func (l *Local) SenderPauses(ctx context.Context, senders []string) ([]time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]time.Duration, len(senders))
	for i, s := range senders {
		out[i] = l.senderPauseRemaining(s)
	}
	return out, nil
}

// SenderPauses reads the senders' shared pauses when Redis answers, and
// each is at least what this process knows (a pause it set or saw holds
// here while Redis is away); without Redis, this process's alone.
func (s *Shared) SenderPauses(ctx context.Context, senders []string) ([]time.Duration, error) {
	local, err := s.fallback.SenderPauses(ctx, senders)
	if err != nil {
		return nil, fmt.Errorf("limiter: sender pauses: %w", err)
	}
	var shared []time.Duration
	err = s.onRedis(ctx, func(ctx context.Context) error {
		var err error
		shared, err = s.redis.SenderPauses(ctx, senders)
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("limiter: sender pauses: %w", ctx.Err())
		}
		return local, nil
	}
	for i := range local {
		local[i] = max(local[i], shared[i])
	}
	return local, nil
}
