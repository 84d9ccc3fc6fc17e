package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/dispatch"
	"smsgw/internal/httpapi/otprecords"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// OTPSent is the answer of POST /v1/otp once the provider took the message.
type OTPSent struct {
	ID                string     `json:"id"`
	Status            sms.Status `json:"status"`
	ProviderMessageID string     `json:"provider_message_id"`
	WaitedMS          int64      `json:"waited_ms"`
}

// postOTP sends now or not at all. Nothing is queued: when no slot or no
// provider answer comes within the deadline the answer is 503 with
// Retry-After. A provider that does not answer in time leaves the outcome
// unknown (the message may still arrive); the problem says so.
//
// The ingress quota is charged before the send is attempted, so a 503 from
// the provider side does cost one unit; every admission refusal (401, 403,
// 400, 429) costs nothing.
func (s *Server) postOTP(w http.ResponseWriter, r *http.Request) {
	arrived := s.Now()
	steps := dispatch.NewSteps(time.Now())
	p := producerFrom(r.Context())
	raw, err := readBody(r, false)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	var req otpRequest
	if err := decodeStrict(raw, &req, ""); err != nil {
		s.WriteError(w, r, err)
		return
	}
	mr := messageRequest{To: req.To, Body: req.Body, From: req.From, Reference: req.Reference, CallbackURL: req.CallbackURL}
	mr.From, _ = p.sender(req.From, "") // the default sender when none is named
	v, errs := s.validateMessage(&mr, sms.ClassOTP, "")
	errs = append(errs, p.bodyControls(mr.Body, "")...)
	deadline := s.Cfg.Messages.OTPDeadline
	if req.DeadlineMS != nil {
		switch d := *req.DeadlineMS; {
		case d < 1 || d > config.MaxOTPDeadline.Milliseconds():
			errs = append(errs, fieldProblem{"deadline_ms", fmt.Sprintf("must be between 1 and %d", config.MaxOTPDeadline.Milliseconds())})
		default:
			deadline = time.Duration(d) * time.Millisecond
		}
	}
	if len(errs) > 0 {
		s.WriteError(w, r, invalid(errs))
		return
	}
	if !p.allowed(sms.ClassOTP) {
		s.WriteError(w, r, errorf(kindForbidden, fmt.Sprintf("producer %s may not send class otp", p.Name)))
		return
	}
	if err := checkCallback(p, v.msg, ""); err != nil {
		s.WriteError(w, r, err)
		return
	}
	if _, err := p.sender(req.From, "from"); err != nil {
		s.WriteError(w, r, err)
		return
	}
	steps.Mark(dispatch.StepDecode)
	// The deadline counts from the arrival and bounds every step before
	// the send too (the idempotency lock, the per-number count, the
	// ingress quota): a slow store makes the answer a 503 on time, not a
	// late one. The steps after the send (giving the number's count back,
	// keeping an unknown outcome's id, the record) use the request's own
	// context: the deadline must not cut them short.
	due := arrived.Add(deadline)
	rctx := r.Context()
	pctx, cancel := context.WithDeadline(rctx, due)
	defer cancel()
	s.idempotent(w, r.WithContext(pctx), p, "otp", v.msg.RequestHash, func(ctx context.Context, key string) (*response, error) {
		steps.Mark(dispatch.StepIdempotency)
		// The fast path queues nothing: the check here is the only one
		// (a queued message's take checks the suppression list again).
		held, err := s.Admit.ProtectOTP(ctx, p.asSender(), v.msg.To)
		if err != nil {
			return nil, deadlineSpent(ctx, err)
		}
		mayHaveSent := false
		defer func() {
			if !mayHaveSent { // refused or not sent: it does not count against the number
				held.GiveBack(rctx, s.Log)
			}
		}()
		steps.Mark(dispatch.StepProtect)
		if _, err := s.admitIngress(ctx, w, p, 1); err != nil {
			return nil, deadlineSpent(ctx, err)
		}
		steps.Mark(dispatch.StepIngress)
		// Stamped with the arrival time: the provider's view of latency
		// (the id's time) starts when the request arrived.
		m := s.Admit.Stamp(ctx, *v.msg, p.asSender(), "", v.ttl, arrived)
		m.ExpiresAt = due.UTC()
		giveBack, err := s.Admit.ChargeOTP(ctx, p.asSender(), m) // admission.StepBudget
		if err != nil {
			return nil, deadlineSpent(ctx, err)
		}
		if giveBack != nil {
			defer func() {
				if !mayHaveSent { // it never reached the provider: its units go back
					giveBack()
				}
			}()
		}
		unknown, err := s.otpUnknownID(ctx, p, key, v.msg.RequestHash)
		if err != nil {
			return nil, deadlineSpent(ctx, err)
		}
		left := time.Until(due)
		if left <= 0 {
			unknown.finish(rctx, s, m.ID, nil)
			return nil, deadlineSpent(ctx, context.DeadlineExceeded)
		}
		if unknown.id != "" {
			m.ID = unknown.id // a retry after an unknown outcome: the provider may drop it
		}
		m.Attempts = unknown.tries + 1 // this attempt, the record's count if it is sent
		steps.Mark(dispatch.StepIdempotency)
		start := time.Now()
		res, err := s.Dispatch.SendNow(dispatch.WithSteps(rctx, steps), m, left)
		s.Metrics.OTP(err, time.Since(start))
		s.Metrics.OTPSteps(steps)
		w.Header().Set("Server-Timing", steps.ServerTiming())
		unknown.finish(rctx, s, m.ID, err)
		mayHaveSent = err == nil || errors.Is(err, dispatch.ErrOutcomeUnknown)
		if err != nil {
			if errors.Is(err, dispatch.ErrOutcomeUnknown) {
				err = &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err, Extra: map[string]any{"id": m.ID},
					Detail: "the provider did not answer within the deadline, answered with a server error or dropped the connection: " +
						"the message may or may not have been sent; " +
						"nothing was queued; a retry with the same Idempotency-Key sends it under the same id"}
			}
			return nil, fmt.Errorf("otp %s to %s: %w", m.ID, sms.MaskPhone(m.To), err)
		}
		s.recordOTP(rctx, m, res.ProviderID)
		return &response{status: http.StatusOK, body: OTPSent{
			ID: m.ID, Status: sms.StatusSent, ProviderMessageID: res.ProviderID, WaitedMS: res.Waited.Milliseconds(),
		}}, nil
	})
}

// deadlineSpent answers a step before the send that failed once the
// OTP's deadline had passed (ctx is bounded by it): the store was too slow
// for the deadline, and nothing was sent. A step's own refusal (a quota,
// a suppressed number) is answered as it is.
func deadlineSpent(ctx context.Context, err error) error {
	var ae *apiError
	var rj *admission.Rejection
	if err == nil || ctx.Err() == nil || !errors.Is(context.Cause(ctx), context.DeadlineExceeded) || errors.As(err, &ae) ||
		errors.As(err, &rj) && rj.Kind != admission.RejectUnavailable {
		return err
	}
	return &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err,
		Detail: "the deadline passed before a send slot was reserved (the gateway's store answered slowly); nothing was sent or queued"}
}

// OTPRecords tracks the fast-path OTP records written in the background
// (otprecords).
type OTPRecords = otprecords.Records

// otpRecordTimeout bounds one record's write.
const otpRecordTimeout = 5 * time.Second

// otpRecordRetryFor bounds how long a record the store cannot take (Redis
// down: the fast path keeps sending at the fallback rate) is retried, from
// 100 ms apart up to 5 s apart; past it, or at a stop, it is given up.
const otpRecordRetryFor = 10 * time.Minute

// recordOTP stores an OTP the fast path sent (the provider answered with
// providerID) as a sent message (queue.RecordSent), so that GET shows it,
// a receipt moves it to delivered and its producer's callbacks follow it
// like any message's. With callbacks the record (and its sent event) is
// written before the answer, so no crash after the 200 loses the event;
// without, it is written after, and the OTP's answer does not wait for
// the store. A write the store cannot take now (an outage) is retried in
// the background until it can, for up to otpRecordRetryFor; a record
// given up is logged and counted. The OTP itself went out.
func (s *Server) recordOTP(ctx context.Context, m *sms.Message, providerID string) {
	sent := *m
	sent.ProviderID = providerID
	r := &s.OTPRecords
	if sent.Callbacks {
		err := s.writeOTPRecord(context.WithoutCancel(ctx), &sent)
		if err == nil {
			return
		}
		if !DependencyDown(err) && !admission.MaybeStored(err) {
			s.otpRecordGivenUp(&sent, err)
			return
		}
	}
	if !r.Start() {
		s.otpRecordGivenUp(&sent, errOTPRecordsBusy)
		return
	}
	go func() {
		defer r.Done()
		s.retryOTPRecord(&sent, !sent.Callbacks)
	}()
}

// retryOTPRecord writes sent until the store takes it (first at once when
// now is set, else after the first wait), while the failures say the store
// is down or slow, for up to otpRecordRetryFor.
func (s *Server) retryOTPRecord(sent *sms.Message, now bool) {
	r := &s.OTPRecords
	giveUpAt := time.Now().Add(otpRecordRetryFor)
	wait := 100 * time.Millisecond
	for tries := 0; ; tries++ {
		var err error
		if tries > 0 || now {
			if err = s.writeOTPRecord(r.Ctx, sent); err == nil {
				if tries > 0 {
					s.Log.Info("fast-path OTP stored as sent after the store came back", "id", sent.ID, "tries", tries+1)
				}
				return
			}
			if !DependencyDown(err) && !admission.MaybeStored(err) {
				s.otpRecordGivenUp(sent, err)
				return
			}
		}
		if time.Now().After(giveUpAt) {
			s.otpRecordGivenUp(sent, err)
			return
		}
		if err != nil {
			s.Metrics.OTPRecordRetried.Inc()
			if n, ok := r.Retried.Add(s.Now(), unknownLogEvery); ok {
				s.Log.Warn("storing fast-path OTPs as sent failed; retrying until the store answers",
					"count", n, "id", sent.ID, "producer", sent.Producer, "err", err)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.Stopping():
			t.Stop()
			if err == nil {
				err = errOTPRecordsBusy
			}
			s.otpRecordGivenUp(sent, err)
			return
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// writeOTPRecord writes sent once, within otpRecordTimeout.
func (s *Server) writeOTPRecord(ctx context.Context, sent *sms.Message) error {
	wctx, cancel := context.WithTimeout(ctx, otpRecordTimeout)
	defer cancel()
	st, err := s.Store.Queue.RecordSent(wctx, sent)
	if err != nil {
		return err
	}
	if st != "" {
		s.Admit.RecordedSent(sent) // stored now: its units count once
	}
	if st.Receipt() {
		// a receipt that came before the provider's answer, applied
		// now: its outcome counts now
		s.Metrics.Receipts.Outcome(sms.ClassOTP, st)
	}
	if sent.Callbacks && s.Hooks.Callbacks != nil {
		s.Hooks.Callbacks.Wake()
	}
	return nil
}

// otpRecordGivenUp counts and (sampled) logs a record not stored.
func (s *Server) otpRecordGivenUp(sent *sms.Message, err error) {
	s.Metrics.OTPRecordFailed.Inc()
	if n, ok := s.OTPRecords.Failed.Add(s.Now(), unknownLogEvery); ok {
		s.Log.Warn("storing fast-path OTPs as sent failed: their status, receipts and callbacks are not kept",
			"count", n, "id", sent.ID, "producer", sent.Producer, "err", err)
	}
}

// errOTPRecordsBusy: every background slot holds a record the store has
// not taken yet (or the App is stopping).
var errOTPRecordsBusy = errors.New("the store is slow: too many OTP records in flight, or stopping")

// otpUnknown is the id an OTP's Idempotency-Key keeps while its outcome is
// unknown, in the answer store under a key of its own scope.
type otpUnknown struct {
	key, token, hash string
	id               string // the id of the earlier attempts; empty if none
	tries            int    // how many attempts under id had an unknown outcome
}

// The kept entry's body is the id, then (from the second attempt) a comma
// and the count of attempts with an unknown outcome.
func otpUnknownBody(id string, tries int) []byte {
	if tries <= 1 {
		return []byte(id)
	}
	return []byte(id + "," + strconv.Itoa(tries))
}

func parseOTPUnknownBody(b []byte) (id string, tries int) {
	s, n, found := strings.Cut(string(b), ",")
	if !sms.ValidID(s) {
		return "", 0
	}
	tries = 1
	if found {
		if v, err := strconv.Atoi(n); err == nil && v > 1 {
			tries = min(v, maxOTPUnknownTries)
		}
	}
	return s, tries
}

// maxOTPUnknownTries bounds the count a kept entry carries.
const maxOTPUnknownTries = 1000

// otpUnknownID returns the id an earlier attempt with this Idempotency-Key
// (key; empty: none) used when its outcome was unknown, and holds that
// entry until finish. The request's own lock is already held, so the
// entry's lock is always free.
func (s *Server) otpUnknownID(ctx context.Context, p *Producer, key, hash string) (otpUnknown, error) {
	if key == "" {
		return otpUnknown{}, nil
	}
	u := otpUnknown{key: admission.IdemKey(p.Name, "otp-unknown", key), hash: hash}
	a, token, err := s.Store.Idem.Acquire(ctx, u.key, idemLockTTL)
	if err != nil {
		return otpUnknown{}, fmt.Errorf("idempotency: otp id: %w", err)
	}
	u.token = token
	if a != nil && a.Hash == hash {
		u.id, u.tries = parseOTPUnknownBody(a.Body)
	}
	return u, nil
}

// finish keeps id (and the count of unknown outcomes) for the window when
// the outcome of its send (err) is unknown, and otherwise releases the
// entry.
func (u otpUnknown) finish(ctx context.Context, s *Server, id string, err error) {
	unknown := errors.Is(err, dispatch.ErrOutcomeUnknown)
	if u.key == "" || (u.token == "" && !unknown) {
		return // nothing held, nothing to count
	}
	var keep *state.Answer
	if unknown {
		// kept (again, with one more attempt counted) whether or not the
		// entry was there: an entry found holds no lock (empty token)
		keep = &state.Answer{Hash: u.hash, Status: http.StatusServiceUnavailable, Body: otpUnknownBody(id, u.tries+1)}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if ferr := s.Store.Idem.Finish(ctx, u.key, u.token, keep); ferr != nil {
		s.Log.WarnContext(ctx, "idempotency: keep the otp id", "err", ferr)
	}
}
