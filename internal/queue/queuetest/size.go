package queuetest

import (
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// The backends' stored-bytes benchmarks measure the same messages at the
// same paces, so that their figures compare.
const (
	// SizeMessages is how many messages a stored-bytes run stores.
	SizeMessages = 5000
	// FullPace is the rate the stored messages are created at: the
	// default target_rps, the most the gateway sends. It spreads their
	// ids' creation times as a real run at full pace would (redisq groups
	// final records by creation second).
	FullPace = 90
	// TenMinutes is how many messages a 10-minute run at full pace
	// completes.
	TenMinutes = 600 * FullPace
)

// SizeNumberID stands for the suppression-list id protection computes for
// a number: 32 hex digits.
const SizeNumberID = "5f1c0e39d2a84b7c91e6f3a0d4b82c57"

// SizeMessage is a typical transactional message: a 110-character body, an
// E.164 number and its suppression-list id, a producer's reference, the
// default TTL (24 h), no idempotency key; message i is created i/pace
// seconds after start.
func SizeMessage(start time.Time, i, pace int) *sms.Message {
	now := start.Add(time.Duration(i) * time.Second / time.Duration(pace))
	body := fmt.Sprintf("Your order %08d has shipped and will arrive tomorrow between 9:00 and 12:00. Track it in the app or reply STOP.", i)
	return &sms.Message{
		ID: sms.NewID(now), Producer: "shop-backend", Class: sms.ClassTransactional,
		To: "+819012345678", NumberID: SizeNumberID,
		Body: body[:110], Reference: fmt.Sprintf("order-%08d", i),
		Segments: 1, CreatedAt: now.UTC(), ExpiresAt: now.UTC().Add(24 * time.Hour),
	}
}

// SentOutcome is the outcome of a send of message id with a Twilio-like
// provider id of 34 characters, each message's its own (receipts index it).
func SentOutcome(id string) queue.Outcome {
	return queue.Outcome{Status: sms.StatusSent, ProviderID: fmt.Sprintf("SM%032x", sha256.Sum256([]byte(id)))[:34], Attempts: 1}
}

// EnqueueAll stores messages msg(0) to msg(n-1) in q with EnqueueMany,
// batch at a time.
func EnqueueAll(tb testing.TB, q queue.Queue, n, batch int, msg func(int) *sms.Message) {
	tb.Helper()
	ms := make([]*sms.Message, 0, batch)
	for i := range n {
		ms = append(ms, msg(i))
		if len(ms) == batch || i == n-1 {
			if _, err := q.EnqueueMany(tb.Context(), ms); err != nil {
				tb.Fatal(err)
			}
			ms = ms[:0]
		}
	}
}
