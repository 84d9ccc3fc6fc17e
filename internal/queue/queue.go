// Package queue is the seam for durable priority queues of messages.
//
// Backends live in sub-packages (embedded: one node, a file on disk; redisq:
// shared by replicas). Every backend passes the conformance suite in
// queuetest. All durations in this seam are relative so that no backend
// depends on the caller's clock: redisq uses Redis TIME, the embedded
// backend its own clock.
//
// Delivery is at-least-once with leases: Take hands a message to one owner
// for a lease; the owner extends the lease while it works (heartbeat) and
// ends it with Complete, Requeue or Dead. A lease that expires is handed on
// by Recover. Ack-type calls made with a lease the caller no longer holds
// return ErrLeaseLost and change nothing.
package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"smsgw/internal/sms"
)

// The errors every backend returns for the same conditions.
var (
	ErrEmpty     = errors.New("queue: no message ready")
	ErrNotFound  = errors.New("queue: message not found")
	ErrLeaseLost = errors.New("queue: lease not held")
	ErrClosed    = errors.New("queue: closed")
	// ErrNotCancelable means the message is sending or done: Cancel changed
	// nothing.
	ErrNotCancelable = errors.New("queue: message is not cancelable")
	// ErrNotReplicated: the backend stored the message but its replicas did
	// not confirm it in time (redisq with WaitReplicas). The message may
	// still be queued; the caller answers "try again", and a retry with the
	// same idempotency key finds it.
	ErrNotReplicated = errors.New("queue: not confirmed by the replicas in time")
	// ErrMaybeStored: the write reached the store but no answer came back
	// (a timeout, or the connection dropped after the request went out):
	// a slow Redis may run it later. The messages may be stored, and then
	// will be sent, so the caller must not say "nothing was queued"; a
	// retry with the same idempotency key finds them.
	ErrMaybeStored = errors.New("queue: the store did not confirm the write in time; it may be stored")
)

// Receipt is a provider's delivery report, matched to a message by
// Reference (our message id, which the send passed to the provider) or,
// without one, by ProviderID through an index the backend keeps from the
// sent message's provider id for the retention.
type Receipt struct {
	ProviderID string     // the provider's message id
	Reference  string     // our message id as the provider echoes it; "" when the vendor has none
	Status     sms.Status // delivered, undelivered or failed (sms.Status.Receipt)
	ErrorCode  string     // the vendor's error code, short, safe; stored as LastError
}

// MaxReceiptField bounds Receipt.ProviderID, Reference and ErrorCode.
const MaxReceiptField = 128

// CheckReceipt is the rule every backend applies to a receipt.
func CheckReceipt(r Receipt) error {
	switch {
	case !r.Status.Receipt():
		return fmt.Errorf("queue: receipt status %q (want delivered, undelivered or failed)", r.Status)
	case r.ProviderID == "" && r.Reference == "":
		return errors.New("queue: receipt names neither a provider id nor a reference")
	case len(r.ProviderID) > MaxReceiptField || len(r.Reference) > MaxReceiptField || len(r.ErrorCode) > MaxReceiptField:
		return fmt.Errorf("queue: receipt field longer than %d bytes", MaxReceiptField)
	}
	return nil
}

// ReceiptResult is what ApplyReceipt did.
type ReceiptResult string

const (
	// ReceiptApplied means the message moved from sent to the receipt's status.
	ReceiptApplied ReceiptResult = "applied"
	// ReceiptParked means the message is not sent yet (sending, or queued again
	// after an unknown outcome), or is a dead letter (its attempts ended
	// unknown, yet one reached the provider); the receipt is kept on it
	// and applied in the same step in which Complete records sent (for a
	// dead letter once RetryDead queues it: then it is not sent again). A receipt that names
	// (by Reference) no stored message but an id created within
	// EarlyReceiptWindow is parked too, with no Message: an OTP of the fast
	// path whose provider answered the receipt before its send, applied by
	// RecordSent.
	ReceiptParked ReceiptResult = "parked"
	// ReceiptDuplicate means the message is already final, or a receipt is
	// already parked on it; nothing changed (the first receipt decides).
	// Message is nil when the receipt parked first has no message yet.
	ReceiptDuplicate ReceiptResult = "duplicate"
	// ReceiptUnknown means no stored message matches.
	ReceiptUnknown ReceiptResult = "unknown"
)

// ReceiptOutcome is the answer of ApplyReceipt.
type ReceiptOutcome struct {
	Result  ReceiptResult
	Message *sms.Message // as stored after the call; nil for ReceiptUnknown (and an early receipt, see ReceiptParked)
}

// EarlyReceiptWindow is how long after its id was created a receipt for a
// message not stored yet is kept for RecordSent (ReceiptParked): the OTP
// fast path stores its message once the provider answered, within the
// longest OTP deadline of that; after the window, such a receipt is
// unknown, and a parked one is dropped.
const EarlyReceiptWindow = 2 * time.Minute

// CompleteStatus reports whether s may end a lease (Outcome.Status): sent,
// failed, expired, or suppressed (the provider refused the send because
// the recipient opted out). Every backend's Complete refuses any other. (A
// take ends a message suppressed by itself when its number is on the
// suppression list: TakeOptions.Suppression.)
func CompleteStatus(s sms.Status) bool {
	return s == sms.StatusSent || s == sms.StatusFailed || s == sms.StatusExpired || s == sms.StatusSuppressed
}

// EnqueueResult is the outcome of one enqueue.
type EnqueueResult struct {
	// Message is the stored message. When Existed is true it is the message
	// first stored under the same (Producer, IdempotencyKey), not the one
	// passed in.
	Message *sms.Message
	Existed bool
	Err     error // per-item error for EnqueueMany
}

// TakeOptions selects what Take may hand out.
type TakeOptions struct {
	Owner   string        // the taker's identity (replica id + worker), recorded with the lease
	Lease   time.Duration // how long the message is held before Recover may hand it on
	Classes []sms.Class   // classes to consider, in this priority order; nil means all, otp first
	// Suppression is the suppression list the take reads: a message whose
	// number is on it is ended suppressed instead of handed out (see
	// Suppression). nil: the list is not read.
	Suppression *Suppression
}

// Suppression is the suppression list as Take and TakeMore read it. The
// list is the gateway's (internal/state, which no queue imports); a
// backend reads it through the field of its kind, which the gateway fills.
//
// A take checks each message it reaches that carries its number's id
// (sms.Message.NumberID) and is of a class the list covers (Covers). One
// whose id is on the list at that moment is never handed out: the take
// ends it suppressed, as Complete with StatusSuppressed ends a lease (its
// final record, LastError ListedReason, its event with
// EventErrorSuppressed, out of Outstanding), spending no attempt, and goes
// on to the next message, so that it still returns up to the messages and
// units asked for, or fewer. A backend ends at most MaxSuppressedPerTake
// in one step, and a take that ended that many and took nothing takes
// again. Handed out as before: a message without an id (stored before
// messages carried one), and one with a receipt parked on it (an earlier
// attempt reached the provider: the send loop records it sent without
// sending it again).
type Suppression struct {
	// Key is the Redis HASH whose fields are the ids on the list
	// (state.RedisSuppressions.IndexKey). redisq decides in its take
	// script, in the step that leases, and ends the messages it found
	// with its completion script in one more round trip, taken only by a
	// take that found any. It must carry the queue's account hash tag.
	Key string
	// Listed reports, for each id, whether it is on the list
	// (state.Suppressions.Contains). The embedded queue asks it inside its
	// take transaction, and ends a listed message in that transaction. An
	// error leaves the message it asked about queued where it was and ends
	// the take there; a take that took nothing then fails with it (the
	// send loop backs off as after any failed take): a list that cannot
	// be read never lets a message through unchecked.
	Listed func(ctx context.Context, ids []string) ([]bool, error)
	// OTP checks OTP messages too (protection.suppress_otp); otherwise
	// transactional and marketing only, as at accept.
	OTP bool
	// Ended, when set, is called with each message the take ended
	// suppressed (its status suppressed), once that is stored and before
	// the take returns: the send loop counts them. It must not block.
	Ended func(m *sms.Message)
}

// Covers reports whether the list applies to a message of class c.
func (s *Suppression) Covers(c sms.Class) bool {
	return s != nil && (c != sms.ClassOTP || s.OTP)
}

// ListedReason is the last error of a message a take ended suppressed
// because its number was on the suppression list (Suppression).
const ListedReason = "the number is on the suppression list: not sent"

// MaxSuppressedPerTake bounds how many messages one step of a take ends
// suppressed (one script or transaction stays short whatever a backlog
// to suppressed numbers holds).
const MaxSuppressedPerTake = 100

// Leased is a message taken under a lease.
type Leased struct {
	Message *sms.Message // Status is StatusSending; Attempts as stored (not yet incremented for this try)
	Token   string       // opaque lease token; pass it back on Extend/Complete/Requeue/Dead
	// Receipt is the status of a delivery receipt parked on the message
	// (delivered, undelivered or failed; empty if none): an earlier attempt
	// whose outcome was unknown reached the provider. Complete with sent
	// stores the receipt's status; the send loop does that without sending
	// the message again.
	Receipt sms.Status
}

// Outcome ends a lease with a terminal status.
type Outcome struct {
	Status     sms.Status // StatusSent, StatusFailed, StatusExpired or StatusSuppressed (CompleteStatus); a receipt parked on the message turns sent into its status, any other end drops it
	ProviderID string     // for sent
	Reason     string     // for failed / expired: short, safe text stored as LastError (empty: the stored one is kept)
	Attempts   int        // attempts made including this one (stored as is)
}

// RequeueOptions puts a leased message back.
type RequeueOptions struct {
	After        time.Duration // not taken again before now+After
	SpendAttempt bool          // false for rate denials and provider throttles
	LastError    string
	Crashed      bool // the send crashed its sender (a panic): Crashes is incremented
	// Announce asks a backend that notifies other processes (Notifier) to
	// wake one of them for the message: set when this process stops and
	// hands back a message it can no longer send.
	Announce bool
	// KeepPlace puts the message back where it was taken from (its ready
	// time and its place in line, as Recover does) instead of at the back
	// of its class; After is then ignored. The send loop hands back so a
	// batch it held through an operator pause, to take it again at once:
	// the take reads the suppression list again.
	KeepPlace bool
}

// MaxHorizons bounds the horizons of one ScheduledWithin call.
const MaxHorizons = 64

// CheckHorizons is the rule every backend applies to ScheduledWithin's
// horizons: 1 to MaxHorizons, not negative, ascending.
func CheckHorizons(horizons []time.Duration) error {
	if len(horizons) == 0 || len(horizons) > MaxHorizons {
		return fmt.Errorf("queue: %d horizons (want 1 to %d)", len(horizons), MaxHorizons)
	}
	for i, h := range horizons {
		if h < 0 || (i > 0 && h < horizons[i-1]) {
			return fmt.Errorf("queue: horizons must be >= 0 and ascending (%v)", horizons)
		}
	}
	return nil
}

// ClassStats is the depth of one class.
type ClassStats struct {
	Ready     int64         // queued and due now
	Scheduled int64         // queued with a future not-before
	Leased    int64         // in flight (sending)
	Dead      int64         // dead letters of this class
	OldestAge time.Duration // age of the oldest queued message (0 if none)
}

// Queue is a durable priority queue.
type Queue interface {
	// Enqueue stores m durably before returning. m.ID must be set (sms.NewID);
	// Status is set to queued. With m.IdempotencyKey set, a second enqueue of
	// the same (Producer, IdempotencyKey) within the idempotency window
	// returns the first message with Existed. An id already stored (a
	// retried enqueue) is not stored twice: the stored message is
	// returned with Existed.
	Enqueue(ctx context.Context, m *sms.Message) (EnqueueResult, error)
	// EnqueueMany stores many messages in one durable commit where the
	// backend can; results are in input order.
	EnqueueMany(ctx context.Context, ms []*sms.Message) ([]EnqueueResult, error)

	// Take leases the next ready message: strict class order, FIFO within a
	// class, never before NotBefore. ErrEmpty when nothing is ready; the
	// duration is then how long until the next scheduled message of the
	// given classes becomes ready (0 if none is scheduled). With
	// opt.Suppression, messages it reaches whose numbers are suppressed are
	// ended on the way, never handed out.
	Take(ctx context.Context, opt TakeOptions) (*Leased, time.Duration, error)
	// TakeMore leases, in one call, more ready messages of one class, in
	// the order Take would hand them out: those of the first class (in
	// opt.Classes' order) that has any ready, while fewer than max are
	// taken and the units taken (each message max(Segments, 1)) are fewer
	// than units. It never waits and returns what it took, possibly none
	// (not ErrEmpty). A sender fills a batch with it in one round trip.
	TakeMore(ctx context.Context, opt TakeOptions, max, units int) ([]*Leased, error)
	Extend(ctx context.Context, l *Leased, lease time.Duration) error
	Complete(ctx context.Context, l *Leased, o Outcome) error
	Requeue(ctx context.Context, l *Leased, o RequeueOptions) error
	// Dead ends the lease and moves the message to the dead letters
	// (Status failed, Dead true), reason stored as LastError (empty: the
	// stored one is kept).
	Dead(ctx context.Context, l *Leased, reason string, attempts int) error

	// ApplyReceipt applies a provider's delivery receipt, atomically and
	// only forward: sent moves to r.Status; a message not sent yet parks
	// the receipt until Complete records sent; a final message, a parked
	// one or an unmatched receipt changes nothing. Replays are harmless.
	ApplyReceipt(ctx context.Context, r Receipt) (ReceiptOutcome, error)
	// RecordSent stores m, which was sent outside the queue (the OTP fast
	// path; m.ProviderID is the provider's id), as a sent message's final
	// record in one step: Get finds it, a receipt moves it on like any
	// sent message, and with m.Callbacks its sent event is written. A
	// receipt parked early for its id (ReceiptParked) is applied in the
	// same step, as Complete applies one: the record takes its status and
	// the one event reports it. It returns the status stored; an id stored
	// already keeps what it has ("", nil).
	RecordSent(ctx context.Context, m *sms.Message) (sms.Status, error)
	// Cancel moves producer's queued (or scheduled) message id to
	// canceled, atomically against Take: exactly one of them wins. As with
	// Complete, what is kept of a canceled message is its final record
	// (no body, no full number), and that is what Cancel returns.
	// ErrNotFound when no such message of that producer is stored,
	// ErrNotCancelable once it is sending or done, or when a receipt is
	// parked on it (the provider has it; the message returned carries the
	// receipt's status).
	Cancel(ctx context.Context, id, producer string) (*sms.Message, error)

	// Recover hands every expired lease back to the ready queue (without
	// spending an attempt) and returns how many it moved.
	Recover(ctx context.Context) (int, error)

	// DeadLetters returns up to limit dead letters, oldest death first
	// (none for a limit of 0 or less).
	DeadLetters(ctx context.Context, limit int) ([]*sms.Message, error)
	// RetryDead queues a dead letter again with its attempts and crashes
	// reset.
	RetryDead(ctx context.Context, id string) error

	// Get returns a message by id (ErrNotFound once retention has passed).
	Get(ctx context.Context, id string) (*sms.Message, error)
	Stats(ctx context.Context) (map[sms.Class]ClassStats, error)
	// ScheduledWithin counts, for each class, the queued messages not due
	// yet that fall due within each of horizons from now (cumulative:
	// counts[i] includes counts[i-1]; horizons ascending, at most
	// MaxHorizons). An estimate of when a scheduled message goes counts
	// those due before it.
	ScheduledWithin(ctx context.Context, horizons []time.Duration) (map[sms.Class][]int64, error)
	// Outstanding is the number of a producer's messages queued or in flight.
	Outstanding(ctx context.Context, producer string) (int64, error)

	Close() error
}

// Notifier is implemented by a backend that several processes share: it
// tells a waiting process, soon after, that messages of a class became
// ready anywhere (an enqueue, a recovered lease, a message handed back by a
// process that stops), so that idle processes wait for the news instead of
// polling. Each piece of news goes to one listener, not to all. The news
// is a hint and may be lost (a connection drops): callers keep a slow poll
// as the backstop.
type Notifier interface {
	// Listen calls wake with every class once, then with each class of
	// the news it gets until ctx ends, and with every class after each
	// reconnection, since
	// news may have been missed meanwhile. It reconnects by itself and
	// returns only when ctx ends.
	//
	// wake reports whether the process takes a message of the class at
	// once (an idle lane): news nobody here acts on is handed on to another
	// process. ready blocks until the process could take a message at once
	// (with fresh, until its next lane finds its queue empty) and reports
	// false when ctx ends first: Listen takes news only then.
	Listen(ctx context.Context, wake func(sms.Class) bool, ready func(ctx context.Context, fresh bool) bool)
}

// Shelver is implemented by a backend that can set aside the messages of
// a producer an operator paused: such a message leaves its class's line
// for the producer's shelf, once, and a take never meets it again until
// Restore puts it back at the place it was taken from. The cost of a take
// does not depend on how many messages are on shelves.
type Shelver interface {
	// SetAside ends l's lease without spending an attempt and puts the
	// message on its producer's shelf, keeping its place in line (its
	// ready time and order), unless sh says the producer is no longer
	// paused: then it goes back to its place in line at once. The check
	// and the move are one atomic step, so that a message set aside after
	// the pause was lifted is never left on the shelf.
	SetAside(ctx context.Context, l *Leased, sh Shelf) error
	// Restore puts up to max messages from producer's shelf back to the
	// places in line they were taken from, and returns how many it took
	// off the shelf (0: the shelf is empty). A message canceled while on
	// the shelf is dropped from it (taken off, not put back).
	Restore(ctx context.Context, producer string, max int) (int, error)
}

// Shelf says whether a producer is still paused, as SetAside checks it.
// The pause is the gateway's (internal/state, which no queue imports); a
// backend reads it through the field of its kind.
type Shelf struct {
	// Key is the Redis HASH of scoped pauses (state.RedisScopedPauses) and
	// Field the producer's scope in it; redisq reads them in its script.
	// Key must carry the queue's account hash tag.
	Key, Field string
	// Held reports whether the producer is paused; the embedded queue asks
	// it inside its transaction.
	Held func() bool
}

// MaxRestore is the most messages one Restore step moves.
const MaxRestore = 500

// Batches is implemented by a backend that keeps the index of batches: the
// ids of the messages one batch request stored (sms.Message.BatchID),
// written in the same atomic step that stores them, so that the index never
// misses a stored message. Each batch's index holds at most the messages
// its requests stored (a request holds at most 1,000) and is kept until
// every message it names has passed its retention (BatchKeep).
type Batches interface {
	// BatchMessages returns the messages producer stored with batch id
	// batch, as Get returns each, in no set order (one whose retention
	// has passed is left out); ErrNotFound when there are none (no such
	// batch, another producer's, or past its retention). It reads them
	// in a few steps, not one per message, and not as one snapshot: each
	// message is as it was when it was read.
	BatchMessages(ctx context.Context, producer, batch string) ([]*sms.Message, error)
}

// BatchKeep is how long after now a backend keeps the batch index entry of
// m, stored at now with a retention of retention: the retention after the
// last time m can still be queued (its expiry; without one its not-before,
// or now), so that the entry outlives the message's own final record.
func BatchKeep(m *sms.Message, now time.Time, retention time.Duration) time.Duration {
	last := now
	if m.NotBefore.After(last) {
		last = m.NotBefore
	}
	if m.ExpiresAt.After(last) {
		last = m.ExpiresAt
	}
	return last.Sub(now) + retention
}
