package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	"smsgw/internal/limiter"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// One is a single message to admit.
type One struct {
	Sender Sender
	Msg    *sms.Message // validated, not stamped
	TTL    time.Duration
	Key    string // the request's Idempotency-Key; "" none
	Field  string // the prefix of the message's fields ("" in a single request)
	// AnswerKey names Key in the answer store ("" none). The script
	// executor looks the first answer up there and keeps Answer(m, eta)
	// there with the message it stores; the in-process executor leaves
	// both to the caller, which holds the key's lock around AdmitOne.
	AnswerKey string
	Answer    func(m *sms.Message, eta time.Time) ([]byte, error)
}

// Decision is what admission decided for a message it did not refuse; on
// a refusal its fields say how far the message got.
type Decision struct {
	Msg      *sms.Message // stamped; stored unless Existing or Replay is set
	ETA      time.Time    // its estimated send time
	Existing *sms.Message // the message Key already named: nothing was stored
	Replay   []byte       // the first answer kept under AnswerKey (script): nothing else ran
	// Ingress is the ingress GCRA's decision when it ran (the RateLimit
	// headers), refused or not.
	Ingress *limiter.KeyDecision
	// Scripted: the script executor's store was called (its steps ran,
	// or it failed).
	Scripted bool
}

// StoreFailed is a store that failed to take a message; it may have
// stored it after all (MaybeStored), under ID.
type StoreFailed struct {
	ID  string
	Err error
}

func (e *StoreFailed) Error() string { return "enqueue: " + e.Err.Error() }
func (e *StoreFailed) Unwrap() error { return e.Err }

// MaybeStored reports whether a failed enqueue may have stored its
// messages after all (they are then sent).
func MaybeStored(err error) bool {
	return errors.Is(err, queue.ErrMaybeStored) || errors.Is(err, queue.ErrNotReplicated)
}

// AdmitOne runs Order for one message at now: on the script executor when
// the pipeline has one and the message is not an OTP (an OTP's count per
// number is a write with a local fallback, protection.go), else in
// process. The error is a refusal (*Rejection), a failed store
// (*StoreFailed) or a dependency's failure.
func (p *Pipeline) AdmitOne(ctx context.Context, r One, now time.Time) (Decision, error) {
	var d Decision
	if rj := Schedule(r.Msg.SendAt, now, r.Field+"send_at"); rj != nil {
		return d, rj
	}
	script := p.Script != nil && r.Msg.Class != sms.ClassOTP
	ts := []Target{{To: r.Msg.To, Field: r.Field + "to", Producer: r.Sender.Name}}
	var suppressed *Rejection
	var held Holds
	if script {
		// the number's id, which the take looks up on the suppression list
		id, err := p.Protect.CheckDeferred(ctx, r.Msg.Class, ts[0])
		if err != nil {
			return d, err
		}
		ts[0].ID = id
	} else {
		errs, hs, err := p.Protect.Check(ctx, r.Msg.Class, ts)
		if err != nil {
			return d, err
		}
		if e := errs[0]; e != nil {
			if e.Kind != RejectSuppressed {
				return d, e
			}
			suppressed = e // an OTP's (suppress_otp): answered at its own step, after the TTL's
		}
		held = hs
	}
	d.Msg = p.Stamp(ctx, *r.Msg, r.Sender, r.Key, r.TTL, now)
	d.Msg.NumberID = ts[0].ID // a take checks the suppression list again with it
	d.ETA = p.ETA.Plan(ctx, now, []*sms.Message{d.Msg}, nil)[0]
	if err := AdmitTTL(d.Msg, d.ETA, r.TTL); err != nil {
		held.GiveBack(ctx, p.Log)
		return d, err
	}
	if script {
		return p.Script.store(ctx, p, r, d, now)
	}
	return p.storeInProcess(ctx, r, d, suppressed, held, now)
}

// storeInProcess runs the steps from StepSuppressed on, one by one. The
// OTP counts held are given back unless the message is (or may be) stored.
func (p *Pipeline) storeInProcess(ctx context.Context, r One, d Decision, suppressed *Rejection, held Holds,
	now time.Time) (_ Decision, err error) {
	stored := false
	defer func() {
		if !stored { // refused, or an earlier message answered: it does not count against its number
			held.GiveBack(ctx, p.Log)
		}
	}()
	if suppressed != nil {
		return d, suppressed
	}
	if _, err := p.Room(ctx, r.Sender, 1); err != nil {
		return d, err
	}
	_, kd, err := p.Charge(ctx, r.Sender, 1)
	var rj *Rejection
	if err == nil || errors.As(err, &rj) {
		d.Ingress = &kd
	}
	if err != nil {
		return d, err
	}
	res, err := p.Enq.Enqueue(ctx, d.Msg)
	if rj, over := overBudget(r.Sender, err, now); over { // StepBudget, decided by the store
		return d, rj
	}
	if err != nil {
		stored = MaybeStored(err) // then the number's OTP count keeps it
		return d, &StoreFailed{ID: d.Msg.ID, Err: err}
	}
	if res.Existed {
		d.Existing = res.Message
		return d, nil
	}
	stored = true
	p.Accepted(now, d.Msg)
	return d, nil
}

// ScriptStore is the script executor's store (Redis): the queue's enqueue
// script behind the coalescer, and the keys its checks read: the answer
// store and the ingress GCRA. Concurrent requests
// share a script run, so under load a message costs less than one round
// trip.
type ScriptStore struct {
	Enq  *Coalescer
	Idem *state.RedisIdempotency
	Keys *limiter.RedisKeys
}

// store runs the InScript steps of Order in one script run.
func (sc *ScriptStore) store(ctx context.Context, p *Pipeline, r One, d Decision, now time.Time) (Decision, error) {
	var ch queue.Checks
	// No suppression lookup at accept: the take ends a message to a
	// listed number (Protector.Check says why).
	ch.MaxOutstanding = max(r.Sender.MaxOutstanding, 0)
	ch.TakenHere = p.TakesHere != nil && p.TakesHere(d.Msg.Class)
	interval, burst, err := limiter.KeyArgs(r.Sender.Name, r.Sender.Ingress, 1)
	if err != nil {
		return d, fmt.Errorf("ingress limiter: %w", err)
	}
	ch.IngressKey, ch.IngressInterval, ch.IngressBurst, ch.IngressCost = sc.Keys.KeyName(r.Sender.Name), interval, burst, 1
	if r.Key != "" && r.Sender.Keyed.Burst >= 1 {
		kn := KeyedLimiterKey(r.Sender.Name)
		if ch.KeyedInterval, ch.KeyedBurst, err = limiter.KeyArgs(kn, r.Sender.Keyed, 1); err != nil {
			return d, fmt.Errorf("keyed-request limiter: %w", err)
		}
		ch.KeyedKey = sc.Keys.KeyName(kn)
	}
	if r.AnswerKey != "" {
		if ch.AnswerKey, err = sc.Idem.AnswerKey(r.AnswerKey); err != nil {
			return d, err
		}
		if ch.Answer, err = r.Answer(d.Msg, d.ETA); err != nil {
			return d, err
		}
		ch.AnswerTTL = sc.Idem.Window()
	}
	d.Scripted = true
	res, err := sc.Enq.EnqueueChecked(ctx, queue.Checked{Message: d.Msg, Checks: ch})
	if res.Ingress {
		d.Ingress = &limiter.KeyDecision{Allowed: res.Refused == queue.NotRefused, Remaining: res.Remaining,
			ResetAfter: res.ResetAfter, RetryAfter: res.RetryAfter}
	}
	if rj, over := overBudget(r.Sender, err, now); over { // StepBudget, in the script
		return d, rj
	}
	if err != nil {
		return d, &StoreFailed{ID: d.Msg.ID, Err: err}
	}
	switch {
	case res.Replay != nil:
		d.Replay = res.Replay
		return d, nil
	case res.Refused == queue.RefusedKeyed:
		return d, TooManyKeyed(r.Sender, res.RetryAfter)
	case res.Refused == queue.RefusedOutstanding:
		return d, p.TooManyQueued(r.Sender, res.Outstanding)
	case res.Refused == queue.RefusedIngress:
		return d, RateLimited(r.Sender, res.RetryAfter)
	case res.Existed:
		d.Existing = res.Message
		return d, nil
	}
	p.Accepted(now, d.Msg)
	return d, nil
}
