package state

import "smsgw/internal/keyspace"

// Every Redis key of this package is built here and nowhere else, from the
// account's key space (keyspace), so all of them share the account's hash
// tag with the queue and limiter keys. The names predate this package
// (the gateway and dispatch wrote them): they must not change, or state
// already in Redis would be lost on an upgrade (TestKeyNamesUnchanged).
type keys struct {
	api      string // the gateway's prefix "api"
	dispatch string // the send loop's prefix "dispatch"
	protect  string // abuse protection's prefix "protect"
}

func newKeys(sp keyspace.Space) keys {
	return keys{api: sp.Prefix("api"), dispatch: sp.Prefix("dispatch"), protect: sp.Prefix("protect")}
}

// idemAnswer holds the first answer to one hashed idempotency key (STRING,
// JSON Answer). "ans:", not the "idem:" of releases before Answer.Form: a
// replica of such a release would read a compact answer as an empty body;
// under another name it finds none and rebuilds the answer from the
// queue's message, as for an answer that expired.
func (k keys) idemAnswer(key string) string { return k.api + "ans:" + key }

// idemLock is the in-flight lock of the same (STRING, token).
func (k keys) idemLock(key string) string { return k.api + "idemlock:" + key }

// pause is the operator pause (STRING, reason; its TTL is the pause's rest).
func (k keys) pause() string { return k.api + "pause" }

// counters is the HASH of account-wide counters: one field per counter and
// sinceField, when the first replica wrote it. A few dozen bytes that never
// expire.
func (k keys) counters() string { return k.api + "counters" }

// throttles is the ZSET of provider 429s: member "<µs>:<nonce>", score the
// Redis time of the 429 in µs; the script trims it to the window.
func (k keys) throttles() string { return k.dispatch + "throttles" }

// otpNumber is the ZSET of OTPs sent to one number, by the number's keyed
// hash (protection.otp_per_number; the number itself is never a key).
func (k keys) otpNumber(hash string) string { return k.protect + "otp:" + hash }

// suppressions is the suppression list: HASH keyed hash → JSON entry.
func (k keys) suppressions() string { return k.protect + "suppressed" }

// suppressionIndex is the ZSET (score 0) of the list's hashes, for paging.
func (k keys) suppressionIndex() string { return k.protect + "suppressed:index" }

// stickySender is the STRING sender a recipient of a sender pool holds,
// by the keyed hash of the pool and the recipient (the number itself is
// never a key); it expires sender_pool_sticky_for after its last use.
func (k keys) stickySender(hash string) string { return k.api + "pool:" + hash }

// numberKey is the STRING secret the number hashes are keyed with.
func (k keys) numberKey() string { return k.protect + "numberkey" }

// inboundApplied is the ZSET of the inbound messages whose keyword was
// applied (member: the keyed hash of adapter and vendor id; score: when
// the memory of it ends, Unix ms on Redis's clock).
func (k keys) inboundApplied() string { return k.protect + "inbound:applied" }
