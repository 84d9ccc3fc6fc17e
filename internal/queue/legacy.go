package queue

import (
	"fmt"
	"time"

	"smsgw/internal/sms"
)

// LegacyMessage is how releases before the backends' own record types
// stored a message: sms.Message's JSON as it was then, frozen here so that
// later changes to the domain type do not change how those values read.
// Both backends still read it (embedded under its legacy record's "msg",
// redisq as the stored value itself); redisq's scripts may also have
// written crashes and the receipt statuses into one.
type LegacyMessage struct {
	ID             string    `json:"id"`
	Producer       string    `json:"producer"`
	Class          string    `json:"class"`
	To             string    `json:"to"`
	From           string    `json:"from"`
	Body           string    `json:"body"`
	Reference      string    `json:"reference"`
	Segments       int       `json:"segments"`
	IdempotencyKey string    `json:"idempotency_key"`
	RequestHash    string    `json:"request_hash"`
	CreatedAt      time.Time `json:"created_at"`
	NotBefore      time.Time `json:"not_before"`
	ExpiresAt      time.Time `json:"expires_at"`
	Status         string    `json:"status"`
	Attempts       int       `json:"attempts"`
	Crashes        int       `json:"crashes,omitempty"`
	LastError      string    `json:"last_error"`
	ProviderID     string    `json:"provider_message_id"`
	Dead           bool      `json:"dead"`
	UpdatedAt      time.Time `json:"updated_at"`
	SentAt         time.Time `json:"sent_at"`
}

// legacyStatuses are the status words a LegacyMessage may carry.
var legacyStatuses = map[string]sms.Status{
	"queued": sms.StatusQueued, "sending": sms.StatusSending, "sent": sms.StatusSent,
	"failed": sms.StatusFailed, "expired": sms.StatusExpired,
	"delivered": sms.StatusDelivered, "undelivered": sms.StatusUndelivered, "canceled": sms.StatusCanceled,
}

// Message is l as the domain type; the caller says which id it was stored
// under, and a value of another id is an error.
func (l *LegacyMessage) Message(id string) (*sms.Message, error) {
	if l.ID != id {
		return nil, fmt.Errorf("stored value of %s is neither a record nor a legacy message of that id", id)
	}
	class, err := sms.ParseClass(l.Class)
	if err != nil {
		return nil, fmt.Errorf("legacy message %s: %w", l.ID, err)
	}
	status, ok := legacyStatuses[l.Status]
	if !ok {
		return nil, fmt.Errorf("legacy message %s: unknown status %q", l.ID, l.Status)
	}
	return &sms.Message{
		ID: l.ID, Producer: l.Producer, Class: class, To: l.To, From: l.From, Body: l.Body,
		Reference: l.Reference, Segments: l.Segments,
		IdempotencyKey: l.IdempotencyKey, RequestHash: l.RequestHash,
		CreatedAt: l.CreatedAt, NotBefore: l.NotBefore, ExpiresAt: l.ExpiresAt,
		Status: status, Attempts: l.Attempts, Crashes: l.Crashes, LastError: l.LastError, ProviderID: l.ProviderID,
		Dead: l.Dead, UpdatedAt: l.UpdatedAt, SentAt: l.SentAt,
	}, nil
}
