// Package sms is the leaf domain of smsgw: messages, priority classes,
// delivery states, phone numbers and segment counting. It imports nothing of
// ours.
package sms

import (
	"fmt"
	"time"
)

// Class is a priority class. Lower values are served first.
type Class uint8

// The classes, highest priority first.
const (
	ClassOTP Class = iota
	ClassTransactional
	ClassMarketing
)

// Classes lists every class in priority order (highest first).
var Classes = []Class{ClassOTP, ClassTransactional, ClassMarketing}

func (c Class) String() string {
	switch c {
	case ClassOTP:
		return "otp"
	case ClassTransactional:
		return "transactional"
	case ClassMarketing:
		return "marketing"
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// Valid reports whether c is one of the defined classes.
func (c Class) Valid() bool { return c <= ClassMarketing }

// ParseClass parses the public name of a class.
func ParseClass(s string) (Class, error) {
	switch s {
	case "otp":
		return ClassOTP, nil
	case "transactional":
		return ClassTransactional, nil
	case "marketing":
		return ClassMarketing, nil
	}
	return 0, fmt.Errorf("unknown class %q (want otp, transactional or marketing)", s)
}

// MarshalText writes the class by name ("otp"), as the API and the
// configuration spell it; an out-of-range class is an error.
func (c Class) MarshalText() ([]byte, error) {
	if !c.Valid() {
		return nil, fmt.Errorf("invalid class %d", uint8(c))
	}
	return []byte(c.String()), nil
}

// UnmarshalText reads a class name, as ParseClass does.
func (c *Class) UnmarshalText(b []byte) error {
	v, err := ParseClass(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// Status is where a message is in its life. Transitions only go forward:
//
//	queued → sending → (queued again on requeue) → sent | failed | expired | suppressed
//	sent → delivered | undelivered | failed   (the provider's receipt)
//	queued → canceled                          (DELETE /v1/messages/{id})
//	queued → suppressed                        (taken while its number is on the suppression list)
//
// "Done" and "final" are two different ends. A done status ends the
// gateway's work: nothing more is sent (sent and every final status). A
// final status never changes again: sent is done but not final, because the
// provider's receipt still moves it to delivered, undelivered or failed. The
// one exception is an operator retrying a dead letter (failed with Dead set),
// which queues it again.
type Status string

// The states of a message (docs/message-states.md).
const (
	StatusQueued  Status = "queued"
	StatusSending Status = "sending"
	StatusSent    Status = "sent"
	StatusFailed  Status = "failed"
	StatusExpired Status = "expired"
	StatusUnknown Status = "unknown"
	// StatusScheduled is a queued message whose send_at has not come yet.
	// It is derived, never stored (see Message.StatusAt).
	StatusScheduled Status = "scheduled"
	// StatusDelivered means the provider's receipt says the handset has it.
	StatusDelivered Status = "delivered"
	// StatusUndelivered means the provider's receipt says it could not be
	// delivered (number off for too long, blocked by the carrier).
	StatusUndelivered Status = "undelivered"
	// StatusCanceled means the producer canceled it while it was queued or
	// scheduled; it was never sent.
	StatusCanceled Status = "canceled"
	// StatusSuppressed means the message was never delivered because its
	// recipient must not get it: the provider refused the send because the
	// recipient opted out there (replied STOP; the number is then put on
	// the suppression list), or the number was on the suppression list
	// when the send loop took the message (never sent). A number already
	// on the list is refused at accept instead and gets no status at all.
	StatusSuppressed Status = "suppressed"
)

// Done reports whether the gateway's work on a message in s is over:
// nothing more is sent. Sent is done, not final (see Final).
func (s Status) Done() bool { return s == StatusSent || s.Final() }

// Final reports whether s can never change again (but for an operator's
// retry of a dead letter).
func (s Status) Final() bool {
	switch s {
	case StatusFailed, StatusExpired, StatusDelivered, StatusUndelivered, StatusCanceled, StatusSuppressed:
		return true
	}
	return false
}

// Terminal is Done, the name before receipts existed.
//
// Deprecated: say Done (the gateway's work is over) or Final (nothing
// changes any more).
func (s Status) Terminal() bool { return s.Done() }

// Receipt reports whether s is a status a provider's receipt may bring:
// delivered, undelivered or failed.
func (s Status) Receipt() bool {
	return s == StatusDelivered || s == StatusUndelivered || s == StatusFailed
}

// CanMoveTo reports whether a message in s may move to next: only forward.
// A receipt applies to sent only; a repeated status, a late sent after a
// receipt, or anything after a final status changes nothing. Queue
// backends apply their own transitions atomically; this is the rule they
// implement, written once for readers and tests.
func (s Status) CanMoveTo(next Status) bool {
	switch s {
	case StatusQueued:
		// suppressed: the take found the number on the suppression list
		return next == StatusSending || next == StatusCanceled || next == StatusSuppressed
	case StatusSending:
		return next == StatusQueued || next == StatusSent || next == StatusFailed || next == StatusExpired ||
			next == StatusSuppressed
	case StatusSent:
		return next.Receipt()
	}
	return false
}

// Message is one SMS accepted by the gateway.
type Message struct {
	ID       string `json:"id"`
	Producer string `json:"producer"`
	Class    Class  `json:"class"`
	To       string `json:"to"`
	// NumberID is the keyed hash of To that stands for the number on the
	// suppression list (the list's id of it), computed at accept: a take
	// checks the list with it, so that a message whose number was
	// suppressed after it was queued is never sent. Empty for a message
	// stored before ids were kept (it is sent as then), or accepted while
	// the shared store was down (an OTP, hashed with a key of the
	// process's own). Kept while the message is queued; a final record
	// drops it with the number and the body. Never logged or answered.
	NumberID  string `json:"number_id,omitempty"`
	From      string `json:"from,omitempty"`
	Body      string `json:"body"`
	Reference string `json:"reference,omitempty"` // the producer's own id, opaque to us
	Segments  int    `json:"segments"`            // units of provider rate this message costs (>= 1)
	// Encoding is set on a message read back without its body (a final
	// record keeps segments and encoding, not the text); otherwise empty,
	// and the body says.
	Encoding Encoding `json:"encoding,omitempty"`
	// BatchID names the batch request that created the message
	// (NewBatchID); empty for a message posted on its own. Kept by the
	// final record.
	BatchID string `json:"batch_id,omitempty"`

	// CallbackURL is where this message's status events go instead of the
	// producer's webhook url; Callbacks is set when the message has any
	// destination for events (the producer's webhook or CallbackURL). Only
	// messages with Callbacks get events in the outbox.
	CallbackURL string `json:"callback_url,omitempty"`
	Callbacks   bool   `json:"callbacks,omitempty"`

	// IdempotencyKey is the producer's Idempotency-Key header, if any; the
	// queue maps (Producer, IdempotencyKey) to one message id. RequestHash is
	// a digest of the request that created the message, so a replay with a
	// different body can be told apart.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	RequestHash    string `json:"request_hash,omitempty"`

	// Budget is the message's charge against its producer's budget
	// (budget.go); the store keeps its units and period ids.
	Budget Budget `json:"-"`

	CreatedAt time.Time `json:"created_at"`
	SendAt    time.Time `json:"send_at,omitzero"`    // the producer's send_at; zero: as soon as possible
	NotBefore time.Time `json:"not_before,omitzero"` // not taken before this time
	ExpiresAt time.Time `json:"expires_at,omitzero"` // zero: never expires

	Status     Status    `json:"status"`
	Attempts   int       `json:"attempts"`
	Crashes    int       `json:"crashes,omitempty"` // sends of it that crashed their sender (a panic); poison after dispatch.poison_after
	LastError  string    `json:"last_error,omitempty"`
	ProviderID string    `json:"provider_message_id,omitempty"`
	Dead       bool      `json:"dead,omitempty"` // failed after exhausting retries: a dead letter
	UpdatedAt  time.Time `json:"updated_at,omitzero"`
	SentAt     time.Time `json:"sent_at,omitzero"`
}

// Cost is the units m costs the provider's rate and a producer's budget:
// its segments when countSegments (provider.count_segments), else one.
func (m *Message) Cost(countSegments bool) int {
	if countSegments {
		return max(m.Segments, 1)
	}
	return 1
}

// Expired reports whether the message's TTL has passed at now.
func (m *Message) Expired(now time.Time) bool {
	return !m.ExpiresAt.IsZero() && !now.Before(m.ExpiresAt)
}

// StatusAt is the status a reader is told at now. A message waiting for
// its send_at is stored as queued and reported as scheduled: storing
// "scheduled" would need a write on every replica's clock when it falls
// due, racing Take, while the queue already holds it back by its
// not-before. Once send_at has passed it is queued again, so a message
// requeued later for a retry or a pause never reads as scheduled.
func (m *Message) StatusAt(now time.Time) Status {
	if m.Status == StatusQueued && m.SendAt.After(now) {
		return StatusScheduled
	}
	return m.Status
}
