package history

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/keyspace"
	"smsgw/internal/sms"
)

// Redis is the history shared by every replica of an account: one hash per
// step, to which each replica adds its counts (HINCRBY), expiring once the
// step has left the window. Safe for concurrent use.
type Redis struct {
	c   redis.UniversalClient
	cfg Config
	k   keySet
	ttl time.Duration
}

var _ Store = (*Redis)(nil)

// Hash fields of a step.
const (
	fieldDirect    = "direct"
	fieldThrottled = "throttled"
)

func classField(kind string, c sms.Class) string { return kind + ":" + c.String() }

// NewRedis returns the history of the account of sp on client (a single
// node, Sentinel or Cluster client).
func NewRedis(client redis.UniversalClient, sp keyspace.Space, cfg Config) (*Redis, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if client == nil {
		return nil, fmt.Errorf("history: redis store needs a client")
	}
	// A step written at its last moment stays readable for the whole
	// window, with one step to spare for the writer's clock.
	return &Redis{c: client, cfg: cfg, k: newKeySet(sp, cfg.Step.Milliseconds()),
		ttl: cfg.Window + 2*cfg.Step}, nil
}

// Now is Redis TIME: every replica numbers the steps alike.
func (r *Redis) Now(ctx context.Context) (time.Time, error) {
	t, err := r.c.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("history: redis time: %w", err)
	}
	return t, nil
}

// Add adds s to the step that holds at, in one transaction on its hash.
func (r *Redis) Add(ctx context.Context, at time.Time, s Sample) error {
	key := r.k.step(r.cfg.stepOf(at))
	pipe := r.c.TxPipeline()
	n := 0
	incr := func(field string, v int64) {
		if v != 0 {
			pipe.HIncrBy(ctx, key, field, v)
			n++
		}
	}
	for _, c := range sms.Classes {
		incr(classField("sent", c), s.Sent[c])
		incr(classField("accepted", c), s.Accepted[c])
	}
	incr(fieldDirect, s.Direct)
	incr(fieldThrottled, s.Throttled)
	if s.HasQueued {
		depth := make([]any, 0, 2*len(sms.Classes))
		for _, c := range sms.Classes {
			depth = append(depth, classField("queued", c), s.Queued[c])
		}
		pipe.HSet(ctx, key, depth...)
		n++
	}
	if n == 0 {
		return ctx.Err()
	}
	pipe.PExpire(ctx, key, r.ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("history: add to %s: %w", key, err)
	}
	return nil
}

// Read reads the window's hashes in one pipeline (one slot: one round
// trip, also on a Cluster).
func (r *Redis) Read(ctx context.Context, now time.Time) (Series, error) {
	first, last := r.cfg.lastSteps(now)
	pipe := r.c.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, 0, last-first+1)
	for step := first; step <= last; step++ {
		cmds = append(cmds, pipe.HGetAll(ctx, r.k.step(step)))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return Series{}, fmt.Errorf("history: read %d steps: %w", len(cmds), err)
	}
	out := Series{Start: r.cfg.startOf(first), Step: r.cfg.Step, Samples: make([]Sample, len(cmds))}
	for i, cmd := range cmds {
		s, err := parseStep(cmd.Val())
		if err != nil {
			return Series{}, fmt.Errorf("history: step %s: %w", r.k.step(first+int64(i)), err)
		}
		out.Samples[i] = s
	}
	return out, nil
}

func parseStep(h map[string]string) (Sample, error) {
	var s Sample
	if len(h) == 0 {
		return s, nil
	}
	var err error
	get := func(field string, dst *int64) {
		v, ok := h[field]
		if !ok || err != nil {
			return
		}
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil {
			err = fmt.Errorf("field %s: %w", field, perr)
			return
		}
		*dst = n
	}
	for _, c := range sms.Classes {
		get(classField("sent", c), &s.Sent[c])
		get(classField("accepted", c), &s.Accepted[c])
		if _, ok := h[classField("queued", c)]; ok {
			s.HasQueued = true
			get(classField("queued", c), &s.Queued[c])
		}
	}
	get(fieldDirect, &s.Direct)
	get(fieldThrottled, &s.Throttled)
	return s, err
}
