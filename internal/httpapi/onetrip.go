package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"smsgw/internal/admission"
	"smsgw/internal/httpapi/accepted"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// acceptScripted answers a validated single message on the script
// executor (Redis mode, admission.ScriptStore): the first-answer lookup of
// its Idempotency-Key, producers[].max_keyed_per_day, the suppression
// list, max_outstanding, the ingress GCRA, the enqueue and the answer all
// run in the queue's enqueue script, in admission.Order. The answer is built before the script, so the
// script stores it with the message: a replay on any replica gets the same
// bytes, and a retry that races the first request gets the first answer
// (the script runs one at a time), never a second message.
func (s *Server) acceptScripted(w http.ResponseWriter, r *http.Request, p *Producer, v validated) {
	ctx := r.Context()
	idem, _, err := idempotencyKeyOf(r)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	now := s.Now()
	one := admission.One{Sender: p.asSender(), Msg: v.msg, TTL: v.ttl, Key: idem}
	var body []byte
	if idem != "" {
		one.AnswerKey = admission.IdemKey(p.Name, "message", idem)
		one.Answer = func(m *sms.Message, eta time.Time) ([]byte, error) {
			am := accepted.Of(m, eta, now)
			var err error
			if body, err = accepted.Marshal(&am); err != nil {
				return nil, err
			}
			return state.EncodeAnswer(compactAnswer(&state.Answer{Hash: v.msg.RequestHash, Status: http.StatusAccepted,
				Body: body, Location: location(m.ID)}))
		}
	}
	d, err := s.Admit.AdmitOne(ctx, one, now)
	s.admitted(w, p, d, err)
	switch {
	case err != nil && !d.Scripted && idem != "" && s.replayStored(w, r, p, idem, v.msg.RequestHash):
		// A retry of an accepted message gets its first answer even
		// when a step that runs before the script (send_at, the
		// destination, the TTL against today's backlog) would now refuse
		// it: the replay step comes first.
		return
	case err != nil:
		s.WriteError(w, r, err)
		return
	case d.Replay != nil:
		a, err := state.DecodeAnswer(string(d.Replay))
		if err != nil {
			s.WriteError(w, r, fmt.Errorf("idempotency: stored answer: %w", err))
			return
		}
		s.replay(w, r, a, v.msg.RequestHash)
		return
	case d.Existing != nil:
		rr, err := s.existing(d.Existing, d.Msg, d.ETA, now)
		s.writeResponse(w, r, rr, err)
		return
	}
	if body == nil {
		am := accepted.Of(d.Msg, d.ETA, now)
		if body, err = accepted.Marshal(&am); err != nil {
			s.WriteError(w, r, err)
			return
		}
	}
	s.stored(d.Msg)
	w.Header().Set("Location", location(d.Msg.ID))
	writeRaw(w, "application/json", http.StatusAccepted, append(body, '\n'))
}

// replayStored answers with the first answer stored for the request's
// Idempotency-Key, if there is one (an extra round trip, taken only by a
// keyed request refused before the script).
func (s *Server) replayStored(w http.ResponseWriter, r *http.Request, p *Producer, idem, hash string) bool {
	a, err := s.Admit.StoredAnswer(r.Context(), admission.IdemKey(p.Name, "message", idem))
	if err != nil || a == nil {
		return false
	}
	s.replay(w, r, a, hash)
	return true
}
