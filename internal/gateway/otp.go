package gateway

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/dispatch"
	"smsgw/internal/sms"
)

// otpSender sends one message synchronously (the dispatcher).
type otpSender interface {
	SendNow(ctx context.Context, m *sms.Message, deadline time.Duration) (dispatch.SendNowResult, error)
}

// notifier wakes the send loop after an enqueue (the dispatcher).
type notifier interface {
	Notify(c sms.Class)
}

type otpSent struct {
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
func (s *server) postOTP(w http.ResponseWriter, r *http.Request) {
	arrived := s.now()
	p := producerFrom(r.Context())
	raw, err := readBody(r, false)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req otpRequest
	if err := decodeStrict(raw, &req, ""); err != nil {
		s.writeError(w, r, err)
		return
	}
	mr := messageRequest{To: req.To, Body: req.Body, From: req.From, Reference: req.Reference, CallbackURL: req.CallbackURL}
	v, errs := s.validateMessage(&mr, sms.ClassOTP, "")
	deadline := s.cfg.Messages.OTPDeadline
	if req.DeadlineMS != nil {
		switch d := *req.DeadlineMS; {
		case d < 1 || d > config.MaxOTPDeadline.Milliseconds():
			errs = append(errs, FieldError{"deadline_ms", fmt.Sprintf("must be between 1 and %d", config.MaxOTPDeadline.Milliseconds())})
		default:
			deadline = time.Duration(d) * time.Millisecond
		}
	}
	if len(errs) > 0 {
		s.writeError(w, r, invalid(errs))
		return
	}
	if !p.allowed(sms.ClassOTP) {
		s.writeError(w, r, errorf(KindForbidden, fmt.Sprintf("producer %s may not send class otp", p.Name)))
		return
	}
	if err := checkCallback(p, v.msg, ""); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.idempotent(w, r, p, "otp", v.msg.RequestHash, func(ctx context.Context, _ string) (*response, error) {
		if _, err := s.admitIngress(ctx, w, p, 1); err != nil {
			return nil, err
		}
		// Stamped with the arrival time: the provider's view of latency
		// (the id's time) starts when the request arrived.
		m := s.stamp(v, p, "", arrived)
		m.ExpiresAt = arrived.Add(deadline).UTC()
		start := time.Now()
		res, err := s.otp.SendNow(ctx, m, deadline)
		s.metrics.otp(err, time.Since(start))
		if err != nil {
			return nil, fmt.Errorf("otp %s to %s: %w", m.ID, sms.MaskPhone(m.To), err)
		}
		s.otpSentEvent(ctx, m, res.ProviderID)
		return &response{status: http.StatusOK, body: otpSent{
			ID: m.ID, Status: sms.StatusSent, ProviderMessageID: res.ProviderID, WaitedMS: res.Waited.Milliseconds(),
		}}, nil
	})
}
