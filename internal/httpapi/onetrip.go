package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"smsgw/internal/admission"
	"smsgw/internal/limiter"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// OneTrip admits and stores a single POST /v1/messages in one Redis round
// trip (Redis mode): the first-answer lookup of its Idempotency-Key, the
// suppression list, max_outstanding, the ingress GCRA, the enqueue and the
// answer all run in the queue's enqueue script, in the order the embedded
// mode runs them one by one in this process (queue.Checks). Concurrent
// requests share the script run (the coalescer), so under load a message
// costs less than one round trip.
//
// Everything that needs no store runs here first, as in embedded mode:
// the fields, send_at, the destination checks, the TTL against the
// backlog estimate. The answer is built before the script, so the script
// stores it with the message: a replay on any replica gets the same bytes,
// and a retry that races the first request gets the first answer (the
// script runs one at a time), never a second message.
//
// An OTP sent through /v1/messages keeps the two-step path: its
// per-number limit is a write with a local fallback (protection.go).
type OneTrip struct {
	Enq  *admission.Coalescer
	Idem *state.RedisIdempotency
	Sup  *state.RedisSuppressions
	Keys *limiter.RedisKeys
}

// acceptOneTrip answers a validated single message on the oneTrip path.
func (s *Server) acceptOneTrip(w http.ResponseWriter, r *http.Request, p *Producer, v validated) {
	ctx := r.Context()
	idem, _, err := idempotencyKeyOf(r)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	req, err := s.prepareOneTrip(ctx, p, v, idem)
	if err != nil {
		// A retry of an accepted message gets its first answer even
		// when a check that runs before the script (send_at, the
		// destination, the TTL against today's backlog) would now refuse
		// it: the answer comes first, as on the step-by-step path.
		if idem != "" && s.replayStored(w, r, p, idem, v.msg.RequestHash) {
			return
		}
		s.WriteError(w, r, err)
		return
	}
	if idem != "" {
		if err := s.admitKeyed(ctx, p); err != nil { // producers[].max_keyed_per_day (keyed.go)
			if !s.replayStored(w, r, p, idem, v.msg.RequestHash) {
				s.WriteError(w, r, err)
			}
			return
		}
	}
	m, ch := req.m, req.ch
	res, err := s.OneTrip.Enq.EnqueueChecked(ctx, queue.Checked{Message: m, Checks: ch})
	if err != nil {
		s.WriteError(w, r, enqueueError(err, m.ID))
		return
	}
	if res.Ingress {
		setRateLimitHeaders(w, p.Ingress, limiter.KeyDecision{Allowed: res.Refused == queue.NotRefused,
			Remaining: res.Remaining, ResetAfter: res.ResetAfter})
	}
	switch {
	case res.Replay != nil:
		a, err := state.DecodeAnswer(string(res.Replay))
		if err != nil {
			s.WriteError(w, r, fmt.Errorf("idempotency: stored answer: %w", err))
			return
		}
		s.replay(w, r, a, v.msg.RequestHash)
		return
	case res.Refused == queue.RefusedSuppressed:
		s.WriteError(w, r, s.Protect.Suppressed(m.Class, "to", ch.SuppressionID))
		return
	case res.Refused == queue.RefusedOutstanding:
		s.WriteError(w, r, s.tooManyQueued(p, res.Outstanding))
		return
	case res.Refused == queue.RefusedIngress:
		s.BodyGate.refusedFor(p, res.RetryAfter, time.Now())
		s.WriteError(w, r, rateLimited(p, res.RetryAfter))
		return
	case res.Existed:
		rr, err := s.existing(res.Message, m, req.eta, m.CreatedAt)
		s.writeResponse(w, r, rr, err)
		return
	}
	s.ETA.Accepted(m.CreatedAt, m)
	s.notify(m.Class)
	s.Metrics.Accepted.WithLabelValues(m.Class.String()).Inc()
	w.Header().Set("Location", location(m.ID))
	writeRaw(w, "application/json", http.StatusAccepted, append(req.body, '\n'))
}

// replayStored answers with the first answer stored for the request's
// Idempotency-Key, if there is one (an extra round trip, taken only by a
// keyed request refused before the script).
func (s *Server) replayStored(w http.ResponseWriter, r *http.Request, p *Producer, idem, hash string) bool {
	a, err := s.OneTrip.Idem.Answer(r.Context(), IdemKey(p.Name, "message", idem))
	if err != nil || a == nil {
		return false
	}
	s.replay(w, r, a, hash)
	return true
}

// oneTripRequest is a message ready for the script: stamped, its checks,
// its estimate and its answer's body.
type oneTripRequest struct {
	m    *sms.Message
	ch   queue.Checks
	eta  time.Time
	body []byte
}

// prepareOneTrip runs what needs no store (send_at, destination, TTL) and
// builds the script's request.
func (s *Server) prepareOneTrip(ctx context.Context, p *Producer, v validated, idem string) (*oneTripRequest, error) {
	now := s.Now()
	if ferr := checkSendAt(v.msg.SendAt, now, ""); ferr != nil {
		return nil, invalid([]fieldProblem{*ferr})
	}
	sid, err := s.Protect.CheckDeferred(ctx, v.msg.Class, admission.Target{To: v.msg.To, Field: "to"})
	if err != nil {
		return nil, err
	}
	req := &oneTripRequest{m: s.stamp(v, p, idem, now)}
	req.m.NumberID = sid // a take checks the suppression list again with it
	req.eta = s.ETA.Plan(ctx, now, []*sms.Message{req.m}, nil)[0]
	if err := admission.AdmitTTL(req.m, req.eta, v.ttl); err != nil {
		return nil, err
	}
	am := acceptedOf(req.m, req.eta, now)
	if req.body, err = marshalAccepted(&am); err != nil {
		return nil, err
	}
	ch := &req.ch
	// No suppression lookup at accept: the take ends a message to a
	// listed number (admission.Protector.Check says why).
	ch.MaxOutstanding = max(p.MaxOutstanding, 0)
	ch.TakenHere = s.Notifier != nil && s.Notifier.TakesHere(req.m.Class)
	interval, burst, err := limiter.KeyArgs(p.Name, p.Ingress, 1)
	if err != nil {
		return nil, fmt.Errorf("ingress limiter: %w", err)
	}
	ch.IngressKey, ch.IngressInterval, ch.IngressBurst, ch.IngressCost = s.OneTrip.Keys.KeyName(p.Name), interval, burst, 1
	if idem != "" {
		if ch.AnswerKey, err = s.OneTrip.Idem.AnswerKey(IdemKey(p.Name, "message", idem)); err != nil {
			return nil, err
		}
		a := compactAnswer(&state.Answer{Hash: v.msg.RequestHash, Status: http.StatusAccepted, Body: req.body, Location: location(req.m.ID)})
		if ch.Answer, err = state.EncodeAnswer(a); err != nil {
			return nil, err
		}
		ch.AnswerTTL = s.OneTrip.Idem.Window()
	}
	return req, nil
}
