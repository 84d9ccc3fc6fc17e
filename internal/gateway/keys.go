package gateway

// Every Redis key the gateway itself writes is built here. All share the
// account's hash tag {smsgw:<account>} with the queue and limiter keys, so
// they live in the same Redis Cluster slot.

type apiKeys struct{ tag string }

func newAPIKeys(account string) apiKeys { return apiKeys{tag: "{smsgw:" + account + "}:api:"} }

// idemAnswer holds the first answer to one hashed (producer, scope, key).
func (k apiKeys) idemAnswer(h string) string { return k.tag + "idem:" + h }

// idemLock is the in-flight lock of the same.
func (k apiKeys) idemLock(h string) string { return k.tag + "idemlock:" + h }

// pause is the operator pause shared by every replica (value: reason).
func (k apiKeys) pause() string { return k.tag + "pause" }

// counters is the hash of account-wide outcome counters (stats): fields
// "sent:<class>", "failed:<class>", "expired:<class>", "dead:<class>",
// "throttled", "otp_unavailable", and "since_ms", when the first replica
// wrote it. A few dozen bytes that never expire.
func (k apiKeys) counters() string { return k.tag + "counters" }
