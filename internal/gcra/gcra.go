// Package gcra holds the one Lua definition of a single-key GCRA decision
// (allowed now or not at all; a denial writes nothing), for every Redis
// script that admits on a key: the limiter's per-producer ingress script,
// and the queue's enqueue script, which admits and stores a message in one
// round trip. It is a leaf: the limiter and the queue share it without
// knowing of each other. The Go twin of the function is the limiter's
// keyStep; the limiter's tests and mutants cover both.
package gcra

import (
	"fmt"
	"time"
)

// Lua defines the Lua functions gcra_step and gcra_allow:
//
//	gcra_step(tat, interval µs, burst, cost (<= burst), now µs of Redis time)
//	gcra_allow(key, interval µs, burst, cost (<= burst), now µs of Redis time)
//
// gcra_step is the decision alone, on the key's stored TAT (0 for none): it
// returns {allowed (1|0), retry-after µs, remaining units, reset-after µs}
// and, when it allows, the new TAT (else nil). gcra_allow is gcra_step on
// the key: it reads the TAT (through gcra_reach, below) and writes the new
// one only when it allows,
// expiring when the key is back to its full burst (gcra_set). A script that
// decides many times on one key (the enqueue script, for a batch of one
// producer's messages) may keep the TAT itself between gcra_step calls and
// write it once at its end: the key ends as gcra_allow's calls would leave
// it.
//
//	gcra_reach(tat, interval µs, burst, now µs of Redis time)
//
// is the stored TAT lowered to now + burst·interval, the furthest ahead an
// allowed request ever leaves a key on a clock that never steps back. A TAT
// beyond it was written before Redis's clock stepped back (the master's
// time stepped, or a failover promoted a replica whose clock is behind):
// read as it is, it would refuse the key for the length of the step. A
// caller stores a lowered TAT whatever it decides, else the bound would
// move on with the clock while every request is refused; that is the one
// write a denial may make, and without a step it never happens.
const Lua = `
local function gcra_reach(tat, interval, burst, now)
  return math.min(tat, now + burst * interval)
end
local function gcra_step(tat, interval, burst, cost, now)
  tat = math.max(tat, now)
  local new = tat + cost * interval
  if new - burst * interval > now then
    return {0, new - burst * interval - now, math.floor((now + burst * interval - tat) / interval), tat - now}, nil
  end
  return {1, 0, math.floor((now + burst * interval - new) / interval), new - now}, new
end
local function gcra_set(key, tat, now)
  redis.call('SET', key, string.format('%d', tat), 'PX', string.format('%d', math.ceil((tat - now) / 1000) + 1))
end
local function gcra_allow(key, interval, burst, cost, now)
  local stored = tonumber(redis.call('GET', key) or '0')
  local tat = gcra_reach(stored, interval, burst, now)
  local d, new = gcra_step(tat, interval, burst, cost, now)
  if new then gcra_set(key, new, now) elseif tat < stored then gcra_set(key, tat, now) end
  return d
end
`

// Decision is gcra_allow's answer: Remaining units could pass right now
// after it, the key is back to its full burst after ResetAfter, and a
// denied request would pass after RetryAfter.
type Decision struct {
	Allowed    bool
	RetryAfter time.Duration
	Remaining  int
	ResetAfter time.Duration
}

// DecisionOf reads gcra_allow's answer.
func DecisionOf(res []int64) (Decision, error) {
	if len(res) != 4 {
		return Decision{}, fmt.Errorf("gcra: unexpected answer %v", res)
	}
	return Decision{
		Allowed:    res[0] == 1,
		RetryAfter: time.Duration(res[1]) * time.Microsecond,
		Remaining:  int(res[2]),
		ResetAfter: time.Duration(res[3]) * time.Microsecond,
	}, nil
}
