package limiter

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// All limiter arithmetic is in integer microseconds: exact in int64 here and
// in the doubles of Redis Lua (Unix time in µs is about 2^51, below 2^53).
// Floating-point seconds since the epoch keep only about 100 µs of precision
// once printed, which is coarser than the 100 µs interval of 10,000/s.

const (
	maxPerSecond = 1e6 // one unit per microsecond is the finest interval
	// maxHorizonMicros bounds burst·interval so that TAT + cost·interval
	// stays far below 2^53 in Lua.
	maxHorizonMicros = int64(400 * 24 * time.Hour / time.Microsecond)
)

// MaxReserveAhead is the furthest ahead any reservation is booked: a
// Request's MaxWait above it counts as MaxReserveAhead (a caller that
// would have waited longer is told to retry instead, which is always
// safe). The dispatcher asks for at most a second.
//
// It bounds the schedule. A grant books a key's units at most
// MaxWait + burst·interval ahead of now, and on a clock that never steps
// back now only grows, so no key's TAT is ever further ahead than that
// "reach". A TAT beyond it comes from Redis's clock having stepped back
// (the master's time stepped, or a failover promoted a replica whose clock
// is behind): its units were booked on the clock before the step, and
// read on the new one they would stop every send for the length of the
// step, an hour for an hour's step. The Redis script lowers such a TAT to
// the reach and stores it, so sending resumes within about
// MaxReserveAhead. The reach is the most any history can leave booked,
// so the lowered schedule is never looser than the one the provider saw:
// the contract holds through the step.
const MaxReserveAhead = 10 * time.Second

// reachMicros is MaxReserveAhead in µs.
const reachMicros = int64(MaxReserveAhead / time.Microsecond)

// params is one GCRA key in microseconds.
type params struct {
	interval int64 // emission interval 1/rate, rounded up so that the rate is never exceeded
	burst    int64
}

// toParams validates a Rate and converts it. The interval is rounded up: a
// rate of 90/s becomes an interval of 11,112 µs (89.99/s), never 11,111 µs
// (90.0009/s), so rounding can only slow the limiter down.
func toParams(name string, r Rate) (params, error) {
	if math.IsNaN(r.PerSecond) || r.PerSecond <= 0 || r.PerSecond > maxPerSecond {
		return params{}, fmt.Errorf("limiter: %s: rate %v/s must be > 0 and <= %v", name, r.PerSecond, maxPerSecond)
	}
	if r.Burst < 1 {
		return params{}, fmt.Errorf("limiter: %s: burst %d must be >= 1", name, r.Burst)
	}
	p := params{interval: int64(math.Ceil(1e6 / r.PerSecond)), burst: int64(r.Burst)}
	if p.interval > maxHorizonMicros/p.burst {
		return params{}, fmt.Errorf("limiter: %s: burst %d at %v/s spans more than %s", name, r.Burst, r.PerSecond, time.Duration(maxHorizonMicros)*time.Microsecond)
	}
	return p, nil
}

// compiled is a validated Config.
type compiled struct {
	global  params
	classes map[string]params
	senders map[string]params
}

func compile(cfg Config) (compiled, error) {
	var errs []error
	g, err := toParams("global", cfg.Global)
	if err != nil {
		errs = append(errs, err)
	}
	c := compiled{global: g, classes: make(map[string]params, len(cfg.Classes))}
	for name, r := range cfg.Classes {
		if name == "" {
			errs = append(errs, errors.New("limiter: a class cap has an empty name"))
			continue
		}
		p, err := toParams("class "+name, r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.classes[name] = p
	}
	c.senders = make(map[string]params, len(cfg.Senders))
	for name, r := range cfg.Senders {
		// The error names no sender: a long code is a phone number.
		p, err := toParams("a sender limit", r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.senders[name] = p
	}
	if len(errs) > 0 {
		return compiled{}, errors.Join(errs...)
	}
	return c, nil
}

// checkRequest validates r and returns it as the deciders read it: MaxWait
// at most MaxReserveAhead.
func checkRequest(r Request) (Request, error) {
	if r.Cost < 1 {
		return r, fmt.Errorf("limiter: cost %d must be >= 1", r.Cost)
	}
	if r.Spare < 0 {
		return r, fmt.Errorf("limiter: spare %d must be >= 0", r.Spare)
	}
	r.MaxWait = min(r.MaxWait, MaxReserveAhead)
	return r, nil
}

// ceilMicros converts a duration to microseconds, rounding up.
func ceilMicros(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// floorMicros converts a duration to microseconds, rounding down: used for
// MaxWait, where rounding down can only make the caller wait less.
func floorMicros(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(d / time.Microsecond)
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// exceedsBurst tells whether cost can never pass one of the keys; the
// sender's key (index sender, -1: none) passes any cost (see step).
func exceedsBurst(ps []params, cost int64, sender int) bool {
	for i, p := range ps {
		if cost > p.burst && i != sender {
			return true
		}
	}
	return false
}

// outcome is the answer of one GCRA step.
type outcome int

const (
	granted    outcome = iota
	tooLate            // the wait exceeds max_wait; wait-maxWait is the retry-after
	tooBig             // cost > burst of a key: never grantable
	noRoom             // the global key would keep less than the request's spare; the value is the retry-after
	senderLate         // the sender's own key alone waits beyond max_wait; the value is the retry-after
)

// step is the GCRA decision over one or more keys, the Go twin of
// reserveScript (the Lua must stay line-for-line equivalent):
//
//   - per key, the earliest conforming time of cost units is
//     max(tat, now) + cost·interval − burst·interval;
//   - the send time is the latest of those and now; it is granted when it is
//     at most maxWait ahead;
//   - with spare > 0, the global key (ps[0]) must keep spare units of its
//     burst free from now on after this booking: max(tat, send) +
//     cost·interval may be at most max(burst − spare, cost)·interval ahead
//     of now (a request that costs the whole burst may still have it);
//     otherwise the request is denied (noRoom) with the exact retry-after;
//   - every key then records max(tat, send) + cost·interval. Using the send
//     time (not now) keeps a key that did not set the delay from counting
//     these units earlier than they are really sent, which would let another
//     sender use the same capacity a second time.
//
// The sender's key (ps[sender]; sender −1 when the request has no sender
// limit) is the one exception to the burst rule: a message costing more
// than the sender's burst (a long message on a 1/s long code, burst 1) is
// not refused but conforms at min(cost, burst) units, and the key still
// records all cost units, so the sender's next message waits for them:
// over any span the sender's rate holds, and it never goes more than
// max(burst, cost) units at once. A sender's key never books ahead: when
// it would delay the send at all, the answer is senderLate with the
// sender's retry-after, and the caller puts that message off without
// holding back other senders. Booked ahead, a slow sender's slot (a
// second away at 1/s) would book the account's and the class's keys at
// that later send time too, and every other sender would wait for it.
//
// Before all of this a tat beyond its reach, now + reachMicros +
// burst·interval, is lowered to it (see MaxReserveAhead): on Local's
// monotonic clock that never happens; the script also stores the lowered
// value on a denial.
//
// On a grant step updates tats in place and returns the wait (>= 0); on a
// denial it changes nothing but a lowered tat and returns the full wait
// from now (tooLate) or the retry-after (noRoom).
func step(now int64, tats []int64, ps []params, cost, maxWait, spare int64, sender int) (outcome, int64) {
	var wait, swait int64
	for i, p := range ps {
		c := cost
		if i == sender {
			c = min(cost, p.burst)
		} else if cost > p.burst {
			return tooBig, 0
		}
		tats[i] = gcraReach(now+reachMicros, tats[i], p)
		tat := max(tats[i], now)
		w := tat + c*p.interval - p.burst*p.interval - now
		if i == sender {
			swait = w
		}
		if w > wait {
			wait = w
		}
	}
	if swait > 0 {
		return senderLate, swait
	}
	if wait > maxWait {
		return tooLate, wait
	}
	send := now + wait
	if spare > 0 {
		g := ps[0]
		if over := max(tats[0], send) + cost*g.interval - max(g.burst-spare, cost)*g.interval - now; over > 0 {
			return noRoom, over
		}
	}
	for i, p := range ps {
		tats[i] = max(tats[i], send) + cost*p.interval
	}
	return granted, wait
}
