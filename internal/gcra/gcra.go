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

// Lua defines the Lua function gcra_allow:
//
//	gcra_allow(key, interval µs, burst, cost (<= burst), now µs of Redis time)
//
// It returns {allowed (1|0), retry-after µs, remaining units, reset-after
// µs}; it writes the key's new TAT only when it allows.
const Lua = `
local function gcra_allow(key, interval, burst, cost, now)
  local tat = math.max(tonumber(redis.call('GET', key) or '0'), now)
  local new = tat + cost * interval
  if new - burst * interval > now then
    return {0, new - burst * interval - now, math.floor((now + burst * interval - tat) / interval), tat - now}
  end
  redis.call('SET', key, string.format('%d', new), 'PX', string.format('%d', math.ceil((new - now) / 1000) + 1))
  return {1, 0, math.floor((now + burst * interval - new) / interval), new - now}
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
