package bench

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/limiter"
	"smsgw/internal/provider"
	"smsgw/internal/sms"
	"smsgw/internal/tick"
)

// pacer is an old limiter: may this pod send one message now?
type pacer interface {
	allow(ctx context.Context) bool
}

// localWindow is the old per-pod limit: a per-second counter in the pod's
// memory, on the pod's clock.
type localWindow struct {
	limit int
	clock func() time.Time
	sec   int64
	n     int
}

func (l *localWindow) allow(context.Context) bool {
	if s := l.clock().Unix(); s != l.sec {
		l.sec, l.n = s, 0
	}
	if l.n >= l.limit {
		return false
	}
	l.n++
	return true
}

// redisWindow is what both old Redis counters share: a limit per second of
// the pod's clock, counted in a key per second under prefix.
type redisWindow struct {
	limit  int
	prefix string
	c      *redis.Client
	clock  func() time.Time
}

// key is the counter of the pod's current second.
func (w *redisWindow) key() string {
	return w.prefix + ":sms:" + strconv.FormatInt(w.clock().Unix(), 10)
}

// getIncrWindow is the old Redis counter: GET, then INCR, then EXPIRE, three
// round trips; between the GET and the INCR every other pod may pass too.
// A Redis error allows the send, as the old code did.
type getIncrWindow struct{ redisWindow }

func (g *getIncrWindow) allow(ctx context.Context) bool {
	key := g.key()
	n, err := g.c.Get(ctx, key).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return ctx.Err() == nil
	}
	if n >= g.limit {
		return false
	}
	g.c.Incr(ctx, key)
	g.c.Expire(ctx, key, 2*time.Second)
	return true
}

// atomicWindow is INCR and EXPIRE in one MULTI: the count is exact, but the
// window is a fixed second of the pod's clock.
type atomicWindow struct{ redisWindow }

func (a *atomicWindow) allow(ctx context.Context) bool {
	key := a.key()
	var incr *redis.IntCmd
	_, err := a.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		incr = p.Incr(ctx, key)
		p.Expire(ctx, key, 2*time.Second)
		return nil
	})
	if err != nil {
		return ctx.Err() == nil
	}
	return incr.Val() <= int64(a.limit)
}

// oldWorker is the old send loop: one FIFO, a denial retried every
// millisecond, a 429 retried in place up to four times.
func oldWorker(p *pod, pc pacer) worker {
	return func(runCtx, hardCtx context.Context, tr *traffic) {
		for {
			var m message
			select {
			case m = <-tr.bulk:
			case <-runCtx.Done():
				return
			}
			for !pc.allow(runCtx) {
				if !tick.Sleep(runCtx, oldSpin) {
					return
				}
			}
			req := p.request(m)
			throttled := true
			for attempt := 0; attempt <= oldRetries && throttled; attempt++ {
				_, err := p.prov.Send(hardCtx, req)
				pe := provider.AsError(err)
				throttled = pe != nil && pe.Reason == provider.ReasonThrottled
				if err != nil && !throttled {
					p.log.Debug("bench: send failed", "err", err)
				}
			}
			if throttled && m.class == sms.ClassOTP {
				tr.otpDropped.Add(1) // the old code gave up after the fifth 429
			}
		}
	}
}

// gcraWorker is one lane of our send path: reserve on the shared schedule,
// wait exactly the returned delay, send; a 429 pauses every pod for its
// Retry-After and the message goes through the limiter again.
func gcraWorker(p *pod, lim *limiter.Redis, lane func(*traffic) <-chan message, maxWait time.Duration) worker {
	return func(runCtx, hardCtx context.Context, tr *traffic) {
		q := lane(tr)
		for {
			var m message
			select {
			case m = <-q:
			case <-runCtx.Done():
				return
			}
			p.deliverGCRA(runCtx, hardCtx, lim, m, maxWait)
		}
	}
}

func (p *pod) deliverGCRA(runCtx, hardCtx context.Context, lim *limiter.Redis, m message, maxWait time.Duration) {
	req := p.request(m)
	for runCtx.Err() == nil {
		d, err := lim.Reserve(runCtx, limiter.Request{Class: m.class.String(), Cost: 1, MaxWait: maxWait})
		if err != nil {
			p.log.Debug("bench: reserve failed", "err", err)
			tick.Sleep(runCtx, errBackoff)
			continue
		}
		if !d.Allowed {
			tick.Sleep(runCtx, d.RetryAfter)
			continue
		}
		// The slot is ours: use it even if the run ends meanwhile.
		if !tick.Sleep(hardCtx, d.Delay) {
			return
		}
		_, err = p.prov.Send(hardCtx, req)
		pe := provider.AsError(err)
		if pe == nil || (pe.Reason != provider.ReasonThrottled && pe.Reason != provider.ReasonSuspended) {
			if err != nil {
				p.log.Debug("bench: send failed", "err", err)
			}
			return
		}
		if err := lim.Pause(hardCtx, provider.ClampRetryAfter(pe.RetryAfter)); err != nil {
			p.log.Debug("bench: pause failed", "err", err)
		}
	}
}

func (p *pod) request(m message) *provider.Request {
	return &provider.Request{ID: m.id, To: m.to, Body: m.body(), Segments: 1, Class: m.class, AcceptedAt: m.arrived}
}
