package httpapi

import (
	"context"
	"time"

	"smsgw/internal/admission"
	"smsgw/internal/dispatch"
	"smsgw/internal/limiter"
	"smsgw/internal/opsview"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// The Server holds each collaborator outside the HTTP layer through one
// of the interfaces below, named by what it does for the handlers; the
// wiring (internal/gateway) fills them with the concrete types and asserts
// at compile time that they fit. A handler can so be read, and tested,
// against the interface alone.

// Admission decides whether a message is accepted: admission.Order on its
// executor (admission.Pipeline), for a single message, a batch, and the
// steps of an OTP sent now. It answers with an *admission.Rejection, never
// an HTTP status.
type Admission interface {
	// AdmitOne and AdmitBatch run every step for queued messages.
	AdmitOne(ctx context.Context, one admission.One, now time.Time) (admission.Decision, error)
	AdmitBatch(ctx context.Context, b admission.Batch, now time.Time) ([]admission.Item, *limiter.KeyDecision, error)
	// ChargeKeyed is admission.StepKeyed in process, after the replay.
	ChargeKeyed(ctx context.Context, s admission.Sender) error
	// Scripted tells whether single queued messages are admitted by the
	// enqueue script, which keeps their first answer (StoredAnswer).
	Scripted() bool
	StoredAnswer(ctx context.Context, key string) (*state.Answer, error)

	// The steps of an OTP sent now (POST /v1/otp): protection, the
	// ingress quota, the stamp, the budget; RecordedSent counts its
	// units once the sent message is stored.
	ProtectOTP(ctx context.Context, s admission.Sender, to string) (admission.Holds, error)
	Charge(ctx context.Context, s admission.Sender, n int) (int, limiter.KeyDecision, error)
	Stamp(ctx context.Context, m sms.Message, s admission.Sender, key string, ttl time.Duration, now time.Time) *sms.Message
	ChargeOTP(ctx context.Context, s admission.Sender, m *sms.Message) (giveBack func(), err error)
	RecordedSent(ms ...*sms.Message)
}

// MessageStore is the queue as the handlers read and change it: a
// message read or canceled, a receipt applied, an OTP sent now recorded,
// the dead letters listed and retried (queue.Queue).
type MessageStore interface {
	Get(ctx context.Context, id string) (*sms.Message, error)
	Cancel(ctx context.Context, id, producer string) (*sms.Message, error)
	ApplyReceipt(ctx context.Context, r queue.Receipt) (queue.ReceiptOutcome, error)
	RecordSent(ctx context.Context, m *sms.Message) (sms.Status, error)
	DeadLetters(ctx context.Context, limit int) ([]*sms.Message, error)
	RetryDead(ctx context.Context, id string) error
}

// Dispatcher is the send loop as the API uses it: one OTP sent now, and a
// wake-up after an enqueue (TakesHere: an idle lane of this process takes
// the class at once, so no other replica is woken for it).
type Dispatcher interface {
	SendNow(ctx context.Context, m *sms.Message, deadline time.Duration) (dispatch.SendNowResult, error)
	Notify(c sms.Class)
	TakesHere(c sms.Class) bool
}

// Operations is what the operator routes read and do (opsview.Desk): the
// operator pause, the stats answer, the send history, the suppression
// list.
type Operations interface {
	State() admission.PauseState
	Left() time.Duration // what is left of the account-wide pause
	Pause(ctx context.Context, d time.Duration, reason string) error
	Resume(ctx context.Context) error
	PauseScope(ctx context.Context, s admission.Scope, d time.Duration, reason string) error
	ResumeScope(ctx context.Context, s admission.Scope) error
	// Stats is what the store answered for, missing why the other
	// sections are not; err only when the limiter failed.
	Stats(ctx context.Context) (out opsview.StatsResponse, missing, err error)
	History(ctx context.Context) (opsview.HistoryResponse, error)
	Suppressions() state.Suppressions
	SuppressionID(ctx context.Context, e164 string) (string, error)
}

// OptOutList is the suppression list as recipients' keywords and the
// provider's opt-out reports change it (admission.OptOuts): which keyword
// a text is, whether a vendor's message was applied already, the change,
// and the count of inbound messages by what came of them.
type OptOutList interface {
	Enabled() bool
	KindOf(text, vendor string) string
	CountInbound(adapter, kind string)
	AppliedKey(ctx context.Context, adapter, providerID string) (string, error)
	Applied(ctx context.Context, key string) (bool, error)
	RememberApplied(ctx context.Context, key string) error
	Suppress(ctx context.Context, e164 string, src state.SuppressionSource, reason string) (string, bool, error)
	Lift(ctx context.Context, e164 string, at time.Time) (string, state.LiftResult, error)
	OptOutFor(ctx context.Context, to, reason string) error
}

// CallbackOutbox is the delivery of producers' callbacks as the handlers
// use it (Callbacks): the deliverer woken for an event just written, and
// the dead events listed and retried.
type CallbackOutbox interface {
	Wake()
	DeadEvents(ctx context.Context, limit int) ([]*queue.Event, error)
	RetryDeadEvent(ctx context.Context, id string) error
}
