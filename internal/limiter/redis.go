package limiter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/gcra"
)

// Redis is GCRA shared by every replica: one Lua script per decision, with
// Redis TIME as the only clock. Its methods take no time from the caller, so
// a replica whose clock is minutes off decides exactly like the others.
// Safe for concurrent use.
type Redis struct {
	client redis.UniversalClient
	keys   keySet
	cfg    Config
	c      compiled
	// classKeys caches the class key names (no allocation per decision).
	classKeys map[string]string
	// uncapped and capped are the reserve script's KEYS and fixed ARGV, for
	// a class without a cap and per capped class: built once, read only.
	uncapped reserveCall
	capped   map[string]reserveCall
	// senders are the limited senders' keys and parameters: built once,
	// read only.
	senders map[string]senderKeys
	// clock is only used to observe this replica's clock skew against
	// Redis; no decision ever reads it.
	clock func() time.Time
	skew  atomic.Int64 // local minus Redis time at the last answer, µs
}

var _ Limiter = (*Redis)(nil)

// NewRedis returns the shared limiter of the provider account on client
// (a single node, Sentinel or Cluster client).
func NewRedis(client redis.UniversalClient, account string, cfg Config) (*Redis, error) {
	if client == nil {
		return nil, errors.New("limiter: redis client is nil")
	}
	keys, err := newKeySet(account)
	if err != nil {
		return nil, err
	}
	c, err := compile(cfg)
	if err != nil {
		return nil, err
	}
	r := &Redis{client: client, keys: keys, cfg: cfg, c: c, classKeys: make(map[string]string), clock: time.Now}
	r.uncapped = reserveCall{
		keys: []string{r.keys.pause(), r.keys.global()},
		args: []any{c.global.interval, c.global.burst},
	}
	r.capped = make(map[string]reserveCall, len(c.classes))
	for name, p := range c.classes {
		r.classKeys[name] = r.keys.class(name)
		r.capped[name] = reserveCall{
			keys: append(slices.Clip(r.uncapped.keys), r.classKeys[name]),
			args: append(slices.Clip(r.uncapped.args), p.interval, p.burst),
		}
	}
	r.senders = make(map[string]senderKeys, len(c.senders))
	for name, p := range c.senders {
		r.senders[name] = senderKeys{key: r.keys.sender(name), pause: r.keys.senderPause(name), p: p}
	}
	return r, nil
}

// senderKeys are one limited sender's keys and its key's parameters.
type senderKeys struct {
	key, pause string
	p          params
}

// reserveCall is what reserveScript gets for one class but the request's
// cost and max wait: KEYS, and ARGV[3] on.
type reserveCall struct {
	keys []string
	args []any
}

// reserveScript decides one request against the shared schedule.
//
//	KEYS[1]  pause key: pause end, Unix µs of Redis time (absent: no pause)
//	KEYS[2]  global key: theoretical arrival time (TAT), Unix µs
//	KEYS[3]  class key, only for a capped class: TAT, Unix µs
//	KEYS[n]  sender key, only for a limited sender: TAT, Unix µs (after
//	         the class key when there is one)
//	KEYS[#KEYS]  the sender's pause key: pause end, Unix µs (absent: none)
//	ARGV[1]  cost in units (>= 1)
//	ARGV[2]  max_wait, µs: how far ahead a slot may be reserved
//	ARGV[3]  global emission interval, µs;  ARGV[4] global burst
//	ARGV[2i-1], ARGV[2i]  emission interval and burst of TAT key i
//	ARGV[2·nk+1]  spare: units of the global burst this booking must
//	         leave free from now on (0: none; see step in gcra.go), nk
//	         being #KEYS − 1 (every key but the sender's pause)
//	ARGV[2·nk+2]  reach, µs: MaxReserveAhead, the furthest a booking
//	         goes beyond its burst
//	ARGV[2·nk+3]  the index of the sender key in KEYS (0: none)
//
// Returns {code, µs, now}, now being Redis TIME in µs:
//
//	code 1  granted; µs = delay: the reserved send time is now + µs
//	code 0  denied;  µs = retry-after: the same request is granted after it
//	code 2  paused;  µs = pause remaining
//	code 3  cost exceeds the burst of a key: never grantable
//	code 4  the sender is paused; µs = its pause remaining
//	code 5  denied by the sender's own key, which never books ahead (see
//	        step in gcra.go); µs = its retry-after
//
// All keys are read in one MGET, so a grant makes 3 (OTP) to 5 (capped
// class, limited sender) Redis calls: TIME, MGET, a SET per TAT key. (MGET
// reads a key of another type as absent where GET failed; nothing else
// writes these keys.)
// Only code 1 writes a booking: when any key would be exceeded none gains
// one. The account's pause holds before the sender's, and the sender's
// pause before any limit. The sender's key passes a cost above its burst
// at min(cost, burst) units and books all of them (see step in gcra.go).
// The one other write lowers a TAT that is further ahead than
// now + reach + burst·interval, which no booking on a clock that never
// steps back can leave, to that bound (see MaxReserveAhead; gcra_reach
// at now + reach): it follows a step back of Redis's clock, and is stored
// whatever the answer, so that the bound does not move on with the clock
// while every request is denied. Every key records max(tat, send) +
// cost·interval (see step in gcra.go, its Go twin) and expires once its
// schedule has run out (gcra_set, shared with the ingress scripts: PX is
// rounded up, plus 1 ms because Redis counts the expiry from its
// millisecond clock, which may be up to 1 ms behind TIME).
//
// When a capped class's own key sets the delay, the global key is booked at
// that later send time and the global capacity before it stays unused (a
// single TAT cannot keep a hole for later). Booking it earlier would let
// another class spend the same capacity again and overshoot. Callers keep
// the waste harmless by reserving a capped class at most (global burst − 2)
// global intervals ahead (33 ms at 90/s, burst 5): then the slots booked
// ahead fit inside the burst and delay no one.
var reserveScript = redis.NewScript(gcra.Lua + `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local cost = tonumber(ARGV[1])
local vals = redis.call('MGET', unpack(KEYS))
local nk = #KEYS - 1
local sidx = tonumber(ARGV[2 * nk + 3])
local tats = {}
local wait = 0
local swait = 0
local ahead = now + tonumber(ARGV[2 * nk + 2])
for i = 2, nk do
  local interval = tonumber(ARGV[2 * i - 1])
  local burst = tonumber(ARGV[2 * i])
  local c = cost
  if i == sidx then
    c = math.min(cost, burst)
  elseif cost > burst then
    return {3, 0, now}
  end
  tats[i] = tonumber(vals[i] or '0')
  local reached = gcra_reach(tats[i], interval, burst, ahead)
  if reached < tats[i] then
    tats[i] = reached
    gcra_set(KEYS[i], reached, now)
  end
  local w = math.max(tats[i], now) + c * interval - burst * interval - now
  if i == sidx then
    swait = w
  end
  if w > wait then
    wait = w
  end
end
local pause = tonumber(vals[1] or '0')
if pause > now then
  return {2, pause - now, now}
end
local sender_pause = tonumber(vals[nk + 1] or '0')
if sender_pause > now then
  return {4, sender_pause - now, now}
end
if swait > 0 then
  return {5, swait, now}
end
if wait > tonumber(ARGV[2]) then
  return {0, wait - tonumber(ARGV[2]), now}
end
local send = now + wait
local spare = tonumber(ARGV[2 * nk + 1])
if spare > 0 then
  local gi, gb = tonumber(ARGV[3]), tonumber(ARGV[4])
  local over = math.max(tats[2], send) + cost * gi - math.max(gb - spare, cost) * gi - now
  if over > 0 then
    return {0, over, now}
  end
end
for i = 2, nk do
  gcra_set(KEYS[i], math.max(tats[i], send) + cost * tonumber(ARGV[2 * i - 1]), now)
end
return {1, wait, now}
`)

// Reserve decides r in one round trip.
func (r *Redis) Reserve(ctx context.Context, req Request) (Decision, error) {
	d, _, err := r.reserve(ctx, req)
	return d, err
}

// reserve also returns Redis time of the decision in µs (tests check the
// reserved send times, now + delay, on the one clock that decides).
func (r *Redis) reserve(ctx context.Context, req Request) (Decision, int64, error) {
	req, err := checkRequest(req)
	if err != nil {
		return Decision{}, 0, err
	}
	call, ok := r.capped[req.Class]
	if !ok {
		call = r.uncapped
	}
	args := append([]any{req.Cost, floorMicros(req.MaxWait)}, call.args...)
	keys := slices.Clip(call.keys)
	sender, limited := r.senders[req.Sender]
	senderAt := 0
	if limited {
		keys = append(keys, sender.key)
		args = append(args, sender.p.interval, sender.p.burst)
		senderAt = len(keys)
		keys = append(keys, sender.pause)
	} else {
		keys = append(keys, r.keys.senderPause(req.Sender))
	}
	args = append(args, req.Spare, reachMicros)
	args = append(args, senderAt)
	res, err := reserveScript.Run(ctx, r.client, keys, args...).Int64Slice()
	if err != nil {
		return Decision{}, 0, fmt.Errorf("limiter: reserve on redis: %w", err)
	}
	if len(res) != 3 {
		return Decision{}, 0, fmt.Errorf("limiter: reserve on redis: unexpected answer %v", res)
	}
	now := res[2]
	r.observe(now)
	switch res[0] {
	case 1:
		return Decision{Allowed: true, Delay: micros(res[1]), Mode: ModeShared}, now, nil
	case 0:
		return Decision{RetryAfter: micros(res[1]), Mode: ModeShared}, now, nil
	case 2:
		return Decision{RetryAfter: micros(res[1]), Paused: true, Mode: ModeShared}, now, nil
	case 3:
		return Decision{}, now, ErrCostExceedsBurst
	case 4:
		return Decision{RetryAfter: micros(res[1]), SenderPaused: true, Mode: ModeShared}, now, nil
	case 5:
		return Decision{RetryAfter: micros(res[1]), SenderLimited: true, Mode: ModeShared}, now, nil
	}
	return Decision{}, now, fmt.Errorf("limiter: reserve on redis: unexpected answer %v", res)
}

func (r *Redis) observe(redisMicros int64) {
	r.skew.Store(r.clock().UnixMicro() - redisMicros)
}

// ClockSkew is this process's wall clock minus Redis time at the last answer
// (plus up to one round trip). Decisions never use it; it shows an operator
// a replica whose clock drifted, the failure that broke the old limiter.
func (r *Redis) ClockSkew() time.Duration { return micros(r.skew.Load()) }

// pauseScript extends the shared pause; it never shortens it.
//
//	KEYS[1]  pause key: pause end, Unix µs of Redis time
//	ARGV[1]  pause length, µs (> 0)
//
// Returns {remaining µs, now}: the pause now in force, which is longer than
// ARGV[1] when a longer pause was already set.
var pauseScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local want = now + tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur >= want then
  return {cur - now, now}
end
redis.call('SET', KEYS[1], string.format('%d', want), 'PX', string.format('%d', math.ceil((want - now) / 1000) + 1))
return {want - now, now}
`)

// Pause stops every replica's Reserve for d, measured on Redis time.
func (r *Redis) Pause(ctx context.Context, d time.Duration) error {
	_, err := r.pause(ctx, d)
	return err
}

// pause returns the pause in force after the call.
func (r *Redis) pause(ctx context.Context, d time.Duration) (time.Duration, error) {
	return r.pauseKey(ctx, r.keys.pause(), "pause", d)
}

// PauseSender stops every replica's Reserves of sender for d, measured on
// Redis time, and returns the pause in force (never shortened).
func (r *Redis) PauseSender(ctx context.Context, sender string, d time.Duration) (time.Duration, error) {
	key := r.keys.senderPause(sender)
	if s, ok := r.senders[sender]; ok {
		key = s.pause
	}
	return r.pauseKey(ctx, key, "sender pause", d)
}

// pauseKey runs pauseScript on key (the account's pause or a sender's)
// and returns the pause in force after the call.
func (r *Redis) pauseKey(ctx context.Context, key, what string, d time.Duration) (time.Duration, error) {
	us := ceilMicros(d)
	if us <= 0 {
		return 0, fmt.Errorf("limiter: %s %s must be > 0", what, d)
	}
	res, err := pauseScript.Run(ctx, r.client, []string{key}, us).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("limiter: %s on redis: %w", what, err)
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("limiter: %s on redis: unexpected answer %v", what, res)
	}
	r.observe(res[1])
	return micros(res[0]), nil
}

// Resume ends the shared pause at once for every replica: an operator's
// override (Pause itself never shortens a pause).
func (r *Redis) Resume(ctx context.Context) error {
	if err := r.client.Del(ctx, r.keys.pause()).Err(); err != nil {
		return fmt.Errorf("limiter: resume on redis: %w", err)
	}
	return nil
}

// stateScript reads the schedule on Redis time.
//
//	KEYS[1]   pause key
//	KEYS[2..] TAT keys (global first, then the classes)
//
// Returns {now, pause end, tat...}, each in Unix µs, 0 for a missing key.
var stateScript = redis.NewScript(`
local t = redis.call('TIME')
local out = {tonumber(t[1]) * 1000000 + tonumber(t[2])}
for i = 1, #KEYS do
  out[i + 1] = tonumber(redis.call('GET', KEYS[i]) or '0')
end
return out
`)

// State reports how far ahead each key's schedule runs and the pause.
func (r *Redis) State(ctx context.Context) (State, error) {
	names := sortedClasses(r.cfg)
	keys := []string{r.keys.pause(), r.keys.global()}
	for _, name := range names {
		keys = append(keys, r.classKeys[name])
	}
	res, err := stateScript.Run(ctx, r.client, keys).Int64Slice()
	if err != nil {
		return State{}, fmt.Errorf("limiter: state on redis: %w", err)
	}
	if len(res) != len(keys)+1 {
		return State{}, fmt.Errorf("limiter: state on redis: unexpected answer %v", res)
	}
	now := res[0]
	r.observe(now)
	st := State{Mode: ModeShared, PauseRemaining: micros(max(0, res[1]-now))}
	st.Keys = append(st.Keys, KeyState{Name: "global", Ahead: micros(max(0, res[2]-now)), Rate: r.cfg.Global})
	for i, name := range names {
		st.Keys = append(st.Keys, KeyState{Name: name, Ahead: micros(max(0, res[3+i]-now)), Rate: r.cfg.Classes[name]})
	}
	return st, nil
}
