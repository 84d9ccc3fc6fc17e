// Package state holds the state the replicas of one provider account share,
// other than the queue and the limiter's schedule: one file per store, each
// store an interface with two implementations that pass one conformance
// suite (statetest):
//
//   - Idempotency (idempotency.go): the first answer to a request with an
//     Idempotency-Key, and the short in-flight lock of a request still
//     running;
//   - Pause (pause.go): the operator's pause switch;
//   - Counters (counters.go): the account-wide outcome counters of the stats
//     answer;
//   - Throttles (throttles.go): the rolling window of provider 429s the
//     suspension guard counts;
//   - NumberLimits (numberlimits.go): the OTPs sent to each number in a
//     rolling window (protection.otp_per_number), keyed by a hash of the
//     number, never the number;
//   - Suppressions (suppressions.go): the suppression list and the account's
//     number key its ids are hashed with; each entry says who made it
//     (operator, recipient, provider), and Lift takes one off only for the
//     sources it names. Its Local implementation is a bbolt file of its
//     own, so that the list survives a restart;
//   - StickySenders (stickysenders.go): the sender of a pool each recipient
//     was last assigned (producers[].sender_pools), keyed by a keyed hash
//     of the pool and the number, expiring sender_pool_sticky_for after
//     its last use.
//
// The Local implementations keep the state in this process, for embedded
// mode (exactly one replica). The Redis implementations keep it under the
// account's hash tag (keyspace), so that every replica sees the same state
// and every key of one account is in one Redis Cluster slot; key names are
// built in keys.go only. A change that must be atomic is one Lua script,
// with its contract (KEYS, ARGV, returns) above its Go wrapper; Redis TIME
// is the clock of every window a script keeps.
//
// What a store must do is written in statetest's package doc. Stores hold no
// policy: how many 429s activate the guard (dispatch), how often a replica
// rereads the pause or flushes its counters (gateway) is the caller's.
// Every store a request can grow is bounded: the local stores by a count
// (see each constructor), the Redis stores by expiry.
package state
