package admission

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"smsgw/internal/limiter"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// Step is one step of admission.
type Step uint8

// The steps, named in Order.
const (
	StepReplay      Step = iota // a first answer kept under the Idempotency-Key is replayed
	StepKeyed                   // a keyed request spends a unit of the producer's max_keyed_per_day
	StepSchedule                // send_at is within its bounds
	StepProtect                 // destination, number type, range hold, OTPs per number
	StepTTL                     // the TTL outlasts the backlog ahead (estimated_send_at)
	StepSuppressed              // an OTP's number is not on the suppression list (protection.suppress_otp)
	StepOutstanding             // the producer is under its max_outstanding
	StepIngress                 // the producer's ingress GCRA grants the message
	StepBudget                  // the message's units fit the producer's daily and monthly budget (budget.go)
	StepStore                   // the message is stored (or the one its key names returned)
)

// Runs is where a step runs on the script executor.
type Runs uint8

// Where steps run.
const (
	InProcess Runs = iota // in this process, before the store is called
	InScript              // in the queue's enqueue script, atomically with the store (queue.Checks)
)

// StepSpec is one row of Order.
type StepSpec struct {
	Step Step
	Name string
	// Script is where the step runs on the script executor (Redis); the
	// in-process executor (embedded store) runs every step here.
	Script Runs
	// OTP: POST /v1/otp runs the step (it queues nothing: no TTL, no
	// max_outstanding, no store; its send is the dispatcher's).
	OTP bool
}

// Order is the admission order, the one table both executors, single
// messages, batches and OTPs follow. The first refusal answers; every step
// before the ingress GCRA only reads (or, for an OTP's count per number,
// is given back), and the GCRA records nothing when it denies, so a
// refused request costs the producer nothing. The suppression list is
// read at accept for OTPs alone (with protection.suppress_otp; they are
// sent at once): a queued message to a listed number is accepted like any
// other and its take ends it, so the answer does not tell a producer which
// numbers are listed. A request with an Idempotency-Key that is not a
// replay spends a unit of its producer's max_keyed_per_day (StepKeyed,
// ChargeKeyed), kept even when a later step refuses it: a retry whose first
// answer is stored is answered from it whatever the bound. The budget
// (StepBudget, budget.go) comes after the ingress GCRA: it is decided by
// the store in the step that stores the message (in process too), so a
// request it refuses has spent its ingress unit, never budget.
//
// The in-process executor runs the steps one by one. The script executor
// runs the InProcess rows here and hands the InScript rows to the queue's
// enqueue script (queue.Checks), which runs them in this order in one
// round trip; its replay step is first in effect too: a request refused in
// process is answered with a stored first answer when one exists. A
// batch is admitted item by item in this order, each step over all the
// items still admitted (its max_outstanding and quota shared in item
// order).
var Order = [...]StepSpec{
	{StepReplay, "replay", InScript, true},
	{StepKeyed, "keyed", InScript, true},
	{StepSchedule, "schedule", InProcess, false},
	{StepProtect, "protect", InProcess, true},
	{StepTTL, "ttl", InProcess, false},
	{StepSuppressed, "suppressed", InProcess, true}, // OTPs only: a queued message's take ends it if listed
	{StepOutstanding, "outstanding", InScript, false},
	{StepIngress, "ingress", InScript, true},
	{StepBudget, "budget", InScript, true}, // decided by the store with the store itself (queue/budget.go); an OTP's by ChargeOTP
	{StepStore, "store", InScript, false},
}

// Sender is what admission knows of a producer.
type Sender struct {
	Name           string
	MaxOutstanding int64 // 0: unlimited
	Ingress        limiter.Rate
	Keyed          limiter.Rate // max_keyed_per_day (burst 0: unbounded)
	Budget         Budget       // producers[].budget (budget.go)
	Webhook        bool         // a default callback URL: every message has callbacks
}

// Store is the queue as admission uses it: a producer's messages queued
// or in flight, and a batch's store.
type Store interface {
	Outstanding(ctx context.Context, producer string) (int64, error)
	EnqueueMany(ctx context.Context, ms []*sms.Message) ([]queue.EnqueueResult, error)
}

// Pipeline runs Order. It is built once and never changes.
type Pipeline struct {
	Protect *Protector
	ETA     *ETAEstimator
	Quiet   sms.QuietPolicy
	Queue   Store
	Ingress limiter.KeyLimiter
	Enq     Enqueuer
	// Script, when set, is the script executor's store (Redis): a single
	// message of a class other than OTP is admitted and stored in one
	// round trip. nil: the in-process executor for everything.
	Script *ScriptStore
	// CountUnits counts the units of messages just stored (usage metrics);
	// nil: none.
	CountUnits func(ms ...*sms.Message)
	// TakesHere says whether an idle lane of this process takes a message
	// of the class at once (the dispatcher); nil: none does.
	TakesHere func(sms.Class) bool
	// TargetRPS paces a max_outstanding refusal's Retry-After.
	TargetRPS float64
	// CountSegments: a message costs its segments in a budget
	// (provider.count_segments), else one unit.
	CountSegments bool
	// Budgets charges and gives back an OTP's units (budget.go); nil:
	// OTPs are not charged.
	Budgets queue.Budgets
	// Pools gives a message that names no from its producer's sender for
	// its class (pools.go); nil: none is given one here.
	Pools *Pools
	Log   *slog.Logger
}

// Scheduling bounds of send_at (api/openapi.yaml).
const (
	// MaxScheduleAhead is how far ahead send_at may be.
	MaxScheduleAhead = 35 * 24 * time.Hour
	// SendAtSkew is how far in the past send_at may be: a producer whose
	// clock runs a little behind ours asks for "now". Such a message is
	// sent as soon as possible.
	SendAtSkew = time.Minute
)

// Schedule is StepSchedule: the time bounds of send_at at now (field
// names it). It runs inside the idempotent part of a request, not with
// the other field checks, so that a replay of an accepted request is
// answered as first even after its send_at has passed. The zero time
// means no send_at, so a request naming the zero instant has to be
// refused with SendAtPast where its send_at is parsed.
func Schedule(sendAt, now time.Time, field string) *Rejection {
	switch {
	case sendAt.IsZero():
		return nil
	case sendAt.Before(now.Add(-SendAtSkew)):
		return invalidField(field, SendAtPast)
	case sendAt.After(now.Add(MaxScheduleAhead)):
		return invalidField(field, fmt.Sprintf("is more than %d days ahead", int(MaxScheduleAhead/(24*time.Hour))))
	}
	return nil
}

// SendAtPast is the reason a send_at more than SendAtSkew in the past is
// refused.
var SendAtPast = fmt.Sprintf("is in the past (more than %s before now)", SendAtSkew)

func invalidField(field, reason string) *Rejection {
	return &Rejection{Kind: RejectInvalid, Detail: field + ": " + reason, Fields: []rejectField{{field, reason}}}
}

// Stamp makes the validated message m a message of sender s, accepted at
// now with the Idempotency-Key key: from its producer's sender for its
// class when it names none (pools.go), due at its send_at (or now), not
// taken before the end of its class's quiet hours for the recipient,
// expiring its ttl after it is due (0: never).
func (p *Pipeline) Stamp(ctx context.Context, m sms.Message, s Sender, key string, ttl time.Duration, now time.Time) *sms.Message {
	sm := p.stamp(m, s, key, ttl, now)
	p.Pools.assignSenders(ctx, s.Name, []*sms.Message{sm}, p.CountSegments, now)
	return sm
}

// stamp is Stamp but for the sender of a message that names none.
func (p *Pipeline) stamp(m sms.Message, s Sender, key string, ttl time.Duration, now time.Time) *sms.Message {
	m.ID = sms.NewID(now)
	m.Producer = s.Name
	m.Budget = p.charge(s.Budget, &m, now)
	m.IdempotencyKey = key
	m.CreatedAt = now.UTC()
	m.Callbacks = s.Webhook || m.CallbackURL != ""
	due := now
	if m.SendAt.After(now) {
		due = m.SendAt
		m.NotBefore = due
	}
	if hold := p.Quiet.Hold(&m, due); !hold.IsZero() {
		m.NotBefore = hold.UTC()
	}
	if ttl > 0 {
		m.ExpiresAt = due.Add(ttl).UTC()
	}
	return &m
}

// Room is StepOutstanding in process: how many of n new messages fit
// under the sender's max_outstanding (n when unlimited); none is a
// refusal.
func (p *Pipeline) Room(ctx context.Context, s Sender, n int) (int, error) {
	if s.MaxOutstanding <= 0 {
		return n, nil
	}
	out, err := p.Queue.Outstanding(ctx, s.Name)
	if err != nil {
		return 0, fmt.Errorf("queue outstanding %s: %w", s.Name, err)
	}
	room := s.MaxOutstanding - out
	if room <= 0 {
		return 0, p.TooManyQueued(s, out)
	}
	return int(min(int64(n), room)), nil
}

// TooManyQueued refuses a sender with out messages outstanding, at or
// over its max_outstanding, wherever the count was read.
func (p *Pipeline) TooManyQueued(s Sender, out int64) *Rejection {
	excess := float64(out - s.MaxOutstanding + 1)
	return &Rejection{Kind: RejectOutstanding,
		RetryAfter: time.Duration(excess / p.TargetRPS * float64(time.Second)),
		Detail: fmt.Sprintf("producer %s has %d messages queued or in flight; at most %d are allowed",
			s.Name, out, s.MaxOutstanding),
		Extra: map[string]any{"outstanding": out, "max_outstanding": s.MaxOutstanding}}
}

// ItemTooManyQueued refuses one batch item beyond the sender's room.
func ItemTooManyQueued(s Sender) *Rejection {
	return &Rejection{Kind: RejectOutstanding, RetryAfter: time.Second,
		Detail: fmt.Sprintf("producer %s may have at most %d messages queued or in flight", s.Name, s.MaxOutstanding)}
}

// RateLimited refuses a sender over its ingress rate.
func RateLimited(s Sender, retryAfter time.Duration) *Rejection {
	return &Rejection{Kind: RejectRateLimited, RetryAfter: retryAfter,
		Detail: fmt.Sprintf("producer %s may send %g messages/s with a burst of %d; retry after the Retry-After seconds",
			s.Name, s.Ingress.PerSecond, s.Ingress.Burst)}
}

// A request with an Idempotency-Key makes the gateway keep its first
// answer (and the queue its key's mapping) for the idempotency window,
// whatever then happens to the message: a producer that keys every
// request and cancels each would otherwise make the stores keep a day of
// its ingress rate. max_keyed_per_day bounds it: a GCRA of that many a day
// with a burst of as many, so at most about twice the bound is kept.

// KeyedLimiterKey is the name of the producer's keyed-request quota beside
// its ingress quota in the same limiter, so both executors share it
// through Redis.
func KeyedLimiterKey(producer string) string { return "keyed\x00" + producer }

// TooManyKeyed refuses a keyed request of a sender over its
// max_keyed_per_day.
func TooManyKeyed(s Sender, retryAfter time.Duration) *Rejection {
	return &Rejection{Kind: RejectTooManyKeyed, RetryAfter: max(retryAfter, time.Second),
		Detail: fmt.Sprintf("producer %s may make %d requests with an Idempotency-Key a day (producers[].max_keyed_per_day); retry after the Retry-After seconds, or send without one",
			s.Name, s.Keyed.Burst),
		Fields: []rejectField{{"Idempotency-Key", "over producers[].max_keyed_per_day"}}}
}

// ChargeKeyed is StepKeyed in process: it charges one keyed request to the
// sender's max_keyed_per_day.
func (p *Pipeline) ChargeKeyed(ctx context.Context, s Sender) error {
	if p.Ingress == nil || s.Keyed.Burst < 1 {
		return nil
	}
	d, err := p.Ingress.Allow(ctx, KeyedLimiterKey(s.Name), s.Keyed, 1)
	if err != nil {
		return fmt.Errorf("keyed-request limiter: %w", err)
	}
	if d.Allowed {
		return nil
	}
	return TooManyKeyed(s, d.RetryAfter)
}

// ItemRateLimited refuses one batch item beyond the sender's burst.
func ItemRateLimited(s Sender) *Rejection {
	return &Rejection{Kind: RejectRateLimited, RetryAfter: time.Second,
		Detail: fmt.Sprintf("the batch exceeded producer %s's ingress burst of %d", s.Name, s.Ingress.Burst)}
}

// Charge is StepIngress in process: it charges n messages to the sender's
// ingress quota and returns how many were granted (n, or fewer for a
// batch, which takes what fits now rather than nothing) and the decision
// for the RateLimit headers; none granted is a refusal.
func (p *Pipeline) Charge(ctx context.Context, s Sender, n int) (int, limiter.KeyDecision, error) {
	cost := min(n, s.Ingress.Burst)
	d, err := p.Ingress.Allow(ctx, s.Name, s.Ingress, cost)
	if err != nil {
		return 0, d, fmt.Errorf("ingress limiter: %w", err)
	}
	if d.Allowed {
		return cost, d, nil
	}
	if cost > 1 && d.Remaining > 0 {
		part := min(d.Remaining, cost)
		d2, err := p.Ingress.Allow(ctx, s.Name, s.Ingress, part)
		if err != nil {
			return 0, d, fmt.Errorf("ingress limiter: %w", err)
		}
		if d2.Allowed {
			return part, d2, nil
		}
	}
	return 0, d, RateLimited(s, d.RetryAfter)
}

// Accepted records messages just stored for the send-time estimate.
func (p *Pipeline) Accepted(now time.Time, ms ...*sms.Message) {
	p.ETA.Accepted(now, ms...)
	if p.CountUnits != nil {
		p.CountUnits(ms...)
	}
}

// ProtectOTP is the protect and suppressed steps for one OTP sent now
// (POST /v1/otp) to the number in the field "to": it queues nothing, so
// these checks are its only ones. The caller gives the holds back when
// nothing is sent.
func (p *Pipeline) ProtectOTP(ctx context.Context, s Sender, to string) (Holds, error) {
	errs, held, err := p.Protect.Check(ctx, sms.ClassOTP, []Target{{To: to, Field: "to", Producer: s.Name}})
	if err != nil {
		return nil, err
	}
	if errs[0] != nil {
		return nil, errs[0]
	}
	return held, nil
}

// Scripted tells whether the script executor admits single queued
// messages (Redis mode, ScriptStore): their first answer is kept with the
// message by the enqueue script.
func (p *Pipeline) Scripted() bool { return p.Script != nil }

// StoredAnswer is the first answer the script executor kept under key
// (IdemKey); nil when there is none, or without a script executor.
func (p *Pipeline) StoredAnswer(ctx context.Context, key string) (*state.Answer, error) {
	if p.Script == nil {
		return nil, nil
	}
	return p.Script.Idem.Answer(ctx, key)
}

// RecordedSent counts the units of messages sent outside the queue (an
// OTP sent now) once they are stored (CountUnits; nothing without it).
func (p *Pipeline) RecordedSent(ms ...*sms.Message) {
	if p.CountUnits != nil {
		p.CountUnits(ms...)
	}
}
