package dispatch

// Every Redis key of this package is built here and nowhere else. All of
// them carry the account's hash tag {smsgw:<account>}, the same tag as the
// limiter's and the queue's keys, so that on Redis Cluster they live in the
// account's one slot.

// dispatchKeys names the keys of one provider account's send loop.
type dispatchKeys struct {
	tag string // "{smsgw:<account>}:dispatch:"
}

func newDispatchKeys(account string) dispatchKeys {
	return dispatchKeys{tag: "{smsgw:" + account + "}:dispatch:"}
}

// throttles is the ZSET of provider 429s seen by any replica: member
// "<µs>:<nonce>", score the Redis time of the 429 in µs. The guard script
// trims it to the rolling window on every call.
func (k dispatchKeys) throttles() string { return k.tag + "throttles" }
