package redisq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/sms"
)

// Wake-ups (queue.Notifier). Every enqueue that makes messages ready pushes
// one token, the classes it made ready, on the account's wake LIST, inside
// its script (a refused message wakes nobody); every replica's listener waits on that
// LIST in a blocking pop. Redis hands each token to one waiting listener
// only, the one that has waited longest: a message enqueued elsewhere
// wakes one idle replica, which takes it at once, instead of every replica
// racing for it (a broadcast woke all 23 processes of a fleet on 2 cores
// for each message, and the one that won its take waited for a core).
//
// The LIST keeps at most wakeTokens tokens, the newest: while no listener
// waits (every replica busy or gone) tokens would only pile up, and a busy
// lane takes again by itself when it is done. A token is a hint and may be
// lost (a connection drops after the pop): the lanes' slow poll is the
// backstop, and a listener wakes every class after an error.
//
// A listener also waits on a LIST of its own (wakeStop): when its context
// ends, one push there ends the blocking pop at once, so a stop never waits
// for the pop's timeout.

// Bounds of the wake-ups.
const (
	// wakeTokens is the most tokens the wake LIST holds.
	wakeTokens = 64
	// wakeWait is how long one blocking pop waits: an idle listener costs
	// Redis one command per wakeWait.
	wakeWait = 10 * time.Second
	// wakeStopTTL bounds the life of a listener's own LIST, should its
	// stop token outlive the listener.
	wakeStopTTL = time.Minute
	// wakeStopToken is what a listener's own LIST receives when it stops.
	wakeStopToken = "stop"
	// listenRetryMin and listenRetryMax bound how fast a listener whose
	// connection fails tries again.
	listenRetryMin = 100 * time.Millisecond
	listenRetryMax = 2 * time.Second
)

// wake is the LIST of wake-up tokens (each "otp" or "transactional,marketing").
// An earlier release published on a pub/sub channel of this name; channels
// and keys do not share a namespace.
func (k keys) wake() string { return k.tag + "wake" }

// wakeStop is the LIST that ends the blocking pop of listener id (wakeStop
// in notify.go); it lives at most wakeStopTTL.
func (k keys) wakeStop(id string) string { return k.tag + "wake:" + id }

// wakePayload names classes as the listener parses them: "otp,marketing".
func wakePayload(classes []sms.Class) string {
	names := make([]string, len(classes))
	for i, c := range classes {
		names[i] = c.String()
	}
	return strings.Join(names, ",")
}

// announce pushes a wake-up token for classes outside the enqueue script
// (a recovery, a stop handing messages back), with the trim that bounds
// the LIST; a failure is only logged at debug: the listeners' polls find
// the messages anyway.
func (q *Queue) announce(ctx context.Context, classes []sms.Class) {
	if err := q.push(ctx, wakePayload(classes)); err != nil {
		q.log.Debug("wake-up not published", "err", err)
	}
}

// push pushes token on the wake LIST and trims it to the newest wakeTokens.
func (q *Queue) push(ctx context.Context, token string) error {
	_, err := q.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.LPush(ctx, q.k.wake(), token)
		p.LTrim(ctx, q.k.wake(), 0, wakeTokens-1)
		return nil
	})
	return err
}

// Listen implements queue.Notifier: it wakes every class once, then each
// class named by a token it pops, until ctx ends. It pops only while ready
// says this process would take at once: a replica whose lanes are all busy
// leaves the tokens to an idle one (they wait on the LIST, at most
// wakeTokens, while no replica is idle). A token none of whose classes this
// process takes at once (its lane for them is busy) is pushed back for
// another replica, and this listener waits for its next idle lane before
// it pops again, so a busy replica does not take the same token back at
// once.
func (q *Queue) Listen(ctx context.Context, wake func(sms.Class) bool, ready func(ctx context.Context, fresh bool) bool) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	own := q.k.wakeStop(hex.EncodeToString(b[:]))
	pushed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(pushed)
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := q.c.Pipelined(sctx, func(p redis.Pipeliner) error {
			p.RPush(sctx, own, wakeStopToken)
			p.Expire(sctx, own, wakeStopTTL)
			return nil
		})
		if err != nil {
			q.log.Debug("wake-up listener: stop token not pushed", "err", err)
		}
	})
	defer func() {
		if !stop() {
			<-pushed // the push has started: Listen ends after it
		}
	}()
	wakeAll := func() {
		for _, c := range sms.Classes {
			_ = wake(c) // news may have been missed meanwhile
		}
	}
	wakeAll()
	retry := listenRetryMin
	fresh := false
	for ctx.Err() == nil {
		if !ready(ctx, fresh) {
			return
		}
		fresh = false
		got, err := q.c.BLPop(ctx, wakeWait, own, q.k.wake()).Result()
		switch {
		case ctx.Err() != nil:
			if err == nil && len(got) == 2 && got[0] == q.k.wake() {
				q.handBack(got[1]) // meant for a replica that still takes
			}
			return
		case errors.Is(err, redis.Nil):
			continue // waited wakeWait: nothing new
		case err != nil:
			q.log.Debug("wake-up listener: pop failed", "err", err)
			if !q.reconnect(ctx, &retry) {
				return
			}
			wakeAll()
			continue
		}
		retry = listenRetryMin
		if len(got) != 2 || got[0] != q.k.wake() {
			continue // the stop token: ctx has ended
		}
		used := false
		for name := range strings.SplitSeq(got[1], ",") {
			if c, err := sms.ParseClass(name); err == nil && wake(c) {
				used = true
			}
		}
		if !used {
			q.handBack(got[1])
			fresh = true
		}
	}
}

// handBack pushes again a token popped after the listener's context ended,
// so that another replica gets it.
func (q *Queue) handBack(token string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := q.push(ctx, token); err != nil {
		q.log.Debug("wake-up listener: token not handed back", "err", err)
	}
}

// reconnect waits *retry (doubled up to listenRetryMax for the next time)
// and then until Redis answers a PING; false when ctx ends first.
func (q *Queue) reconnect(ctx context.Context, retry *time.Duration) bool {
	for {
		t := time.NewTimer(*retry)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false
		}
		*retry = min(*retry*2, listenRetryMax)
		err := q.c.Ping(ctx).Err()
		if ctx.Err() != nil {
			return false
		}
		if err == nil {
			return true
		}
	}
}
