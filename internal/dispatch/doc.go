// Package dispatch is the send loop: it takes messages from the queue, paces
// them through the limiter, sends them through the provider behind a circuit
// breaker and records each outcome. The steps of one send are in one file
// per stage: take.go, reserve.go, send.go and record.go; what a provider's
// answer means (one classification and its effects on every replica, for
// both paths) in outcome.go; the OTP fast path, which runs the same
// reservation, breaker, send and answer steps but returns a typed error
// instead of queueing, in sendnow.go; the lease loops
// (heartbeat, recoverer, guard refresh) in loops.go; the suspension guard
// in guard.go. The Dispatcher and its state are in dispatch.go, its
// configuration in config.go, Start and Stop in lifecycle.go, the wake-ups
// and idleness in wake.go, its exported errors in errors.go.
//
// # Shape of one process
//
//	otp lane:  pacer ──▶ OTPWorkers senders   (takes OTP only)
//	bulk lane: pacer ──▶ Workers senders      (takes transactional, then marketing)
//
// A pacer is the only goroutine of its lane that calls Take and Reserve. It
// takes a message only when one of its senders is free, reserves its slot
// and hands it to a sender, which sleeps the reserved delay and sends. When
// the limiter denies, the pacer alone sleeps exactly the returned
// RetryAfter (W workers never wake together to ask Redis again), or, when
// that is longer than HoldMax (a pause, a saturated cap), requeues the
// message without spending an attempt and keeps off that class until then,
// so that an OTP arriving meanwhile is taken at once. OTP has senders of its
// own, so it never waits for a worker busy with marketing.
//
// The bulk pacer reserves in batches: it takes up to BulkBatch units of one
// class (the first message with Take, the rest with one TakeMore call) and
// reserves them in one limiter call. With N replicas saturating a
// key, every slot opening is asked for by N pacers; batching divides those
// calls by the batch size (measured, 3 replicas at the 70/s marketing cap:
// 1.0 reservation per message instead of 3.8). The first send of a batch
// goes alone and the rest follow its answer, so a 429 stops them in this
// process.
//
// The API calls Notify after every enqueue; it wakes this process's lane at
// once. A queue shared by processes that announces ready messages
// (queue.Notifier: redisq's enqueue pushes a token naming its classes,
// which one idle replica pops) is listened to, and the announcement wakes
// that replica's lanes the same way. The lanes' polls (OTPPoll, BulkPoll; 5 s
// with a notifying queue) are then only the backstop for a lost
// announcement. Idle reports whether this process sent anything lately:
// the guard refresh here, and the gateway's loops of shared reads, slow
// down while it is idle, so that an idle fleet costs Redis little.
//
// # What the send loop does to a message
//
//	queued ──Take, its number on the suppression list──▶ suppressed (ended by the queue within the take:
//	                                                      never sent, no rate, no attempt; Config.Suppression)
//	queued ──Take──▶ sending ──sent──────────────▶ sent
//	                    │    ──permanent error────▶ failed
//	                    │    ──recipient opted out at the provider──▶ suppressed (the number reported to OptOuts)
//	                    │    ──TTL passed─────────▶ expired (never sent)
//	                    │    ──recipient's quiet hours (Hold)──▶ queued at their end (no attempt, no rate;
//	                    │                                        expired if the TTL ends first)
//	                    │    ──temporary error, attempts left──▶ queued at now+backoff (attempt spent)
//	                    │    ──temporary error, no attempts────▶ failed, dead letter
//	                    │    ──429 / suspension───▶ queued at now+Retry-After (no attempt; every replica paused)
//	                    │    ──the sender's 429, queue full or setup──▶ queued at now+Retry-After (no attempt;
//	                    │                                                that sender paused on every replica; senders.go)
//	                    │    ──credentials refused▶ queued at now+AuthPause (no attempt; every replica paused)
//	                    │    ──limiter wait > HoldMax, breaker open, Stop──▶ queued (no attempt)
//	                    │    ──its sender's limit or pause──▶ queued at the sender's next slot (no attempt; no class held)
//	                    └────replica dies: lease expires, another replica's recoverer──▶ queued
//
// The suppression list is read at accept (the gateway's protection) and
// again when a message's turn comes: every take is given the list
// (queue.Suppression), and the queue ends a message whose number was put
// on it after the message was accepted (a recipient's STOP, an operator,
// the provider's report) instead of handing it out, in its take script or
// transaction; the lane never sees it, and listedEnded counts it. A
// message stored without its number's id is sent as before. The OTP fast
// path queues nothing: for it the check at accept is the only one.
//
// A temporary error is a 5xx or a network failure (the provider did not
// take the message) or an unknown outcome (timeout, unreadable 2xx: the
// provider may have it, so the retry carries the same id). The OTP fast
// path (SendNow) has the same effects on every replica for each answer (a
// 429 or refused credentials pause everyone; an opt-out is reported to
// OptOuts, which puts the number on the suppression list) and answers its caller with
// NoSlotError, ErrUnavailable, ErrOutcomeUnknown or the provider's
// rejection; nothing is queued.
//
// # Suspension guard
//
// Every provider 429 is recorded in a rolling window shared by all
// replicas. The window's storage is the caller's (internal/state: a ZSET
// under the account's hash tag, trimmed by a Lua script on Redis time, or
// memory for embedded mode); this package holds the policy (NewGuard). Each
// replica reads the count every GuardRefresh. From ActivateAt (default half
// of the provider's 300) every reservation costs GuardSlowdown (default 2)
// times the message's cost, capped by the limiter's burst, and every
// throttle pause lasts GuardSlowdown times the Retry-After: all replicas
// send at half the rate until the window forgets the 429s. The gauge
// smsgw_dispatch_suspension_guard_active says when.
package dispatch
