package history

import (
	"strconv"

	"smsgw/internal/keyspace"
)

// Every Redis key of the history is built here, from the account's key
// space: all share its hash tag with the queue, limiter and API keys, so
// they live in one Redis Cluster slot and one transaction may touch them.

type keySet struct{ prefix string }

// newKeySet names the history of one account for steps of stepMS
// milliseconds; the step length is part of the name, so replicas that were
// configured differently never add into each other's steps.
func newKeySet(sp keyspace.Space, stepMS int64) keySet {
	return keySet{prefix: sp.Prefix("history", strconv.FormatInt(stepMS, 10))}
}

// step is the hash of step number n (Unix ms / step ms). Fields:
// "sent:<class>", "accepted:<class>", "queued:<class>", "direct",
// "throttled"; it expires once it has left the window.
func (k keySet) step(n int64) string { return k.prefix + strconv.FormatInt(n, 10) }
