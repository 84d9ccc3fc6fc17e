package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"smsgw/internal/admission"
	"smsgw/internal/httpapi/accepted"
	"smsgw/internal/state"
)

// Idempotency works in two layers:
//
//   - the queue maps (producer, Idempotency-Key) to the first message for
//     its idempotency window (24 h), so a retried POST never queues a second
//     message, on any replica;
//   - this file keeps the first answer (status and body) for the same window
//     and a short in-flight lock, so a replay gets the same bytes and a retry
//     that races the first request gets 409 instead of waiting on it.
//
// The answer store is a state.Idempotency: Redis (shared by replicas) or,
// in embedded mode, this process's memory, bounded by a count and by bytes.
// Answers are stored compressed (state.CompactAnswer), one answer is at most
// state.MaxAnswerBytes (a larger one is not stored), a batch answer at most
// answerBytesPerAccepted per accepted item (each paid one unit of ingress
// quota), and a batch refused whole is not stored at all and costs one
// unit, so no request makes the store keep more than a few KB per unit of
// quota it paid, and never for free. An answer
// evicted or lost with a restart is rebuilt from the stored message (same
// id, class and segments; estimated_send_at recomputed).

const (
	// idemLockTTL bounds how long a crashed request can hold a key; it is
	// longer than any request may run (http.write_timeout defaults to 30 s,
	// but an enqueue answers in milliseconds).
	idemLockTTL = 15 * time.Second
	// maxIdempotencyKeyLen bounds the Idempotency-Key header.
	maxIdempotencyKeyLen = 255
)

// validIdempotencyKey: 1..255 printable ASCII characters.
func validIdempotencyKey(k string) bool {
	if k == "" || len(k) > maxIdempotencyKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// idempotencyKeyOf reads the request's Idempotency-Key: present or not,
// and a 400 naming the header when present but not a valid key, or present
// more than once (a proxy in front of us may read another one than we
// would).
func idempotencyKeyOf(r *http.Request) (string, bool, error) {
	vals := r.Header.Values("Idempotency-Key")
	switch len(vals) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", true, fieldError("Idempotency-Key", "must appear once")
	}
	key := vals[0]
	if !validIdempotencyKey(key) {
		return "", true, fieldError("Idempotency-Key", fmt.Sprintf("must be 1 to %d printable ASCII characters", maxIdempotencyKeyLen))
	}
	return key, true, nil
}

// response is what a handler wants written; the idempotency layer may
// store and replay it.
type response struct {
	status   int
	body     any
	location string
	replayed bool // the queue said the message already existed
	noStore  bool // answer it, but keep no copy (a batch refused whole: a replay refuses it again)
	// storeBudget, when > 0, is the most the store may keep for this
	// answer (compressed): a batch answer is kept only within
	// answerBytesPerAccepted per item accepted, what the producer's quota
	// paid for. A larger one is answered and not kept: a replay runs the
	// batch again, and the queue answers its accepted items with the
	// same messages.
	storeBudget int
}

// answerBytesPerAccepted is a batch answer's store budget per accepted
// item: an accepted item's result takes ~100 bytes compressed, so only
// rejected items' problems (text the client chose, e.g. unknown member
// names) can exceed it.
const answerBytesPerAccepted = 1024

// idempotent runs run at most once per Idempotency-Key (when the request
// has one) and writes its answer, replaying the first answer to repeats.
// hash is the digest of the whole request; scope separates endpoints.
func (s *Server) idempotent(w http.ResponseWriter, r *http.Request, p *Producer, scope, hash string,
	run func(ctx context.Context, idemKey string) (*response, error)) {
	ctx := r.Context()
	key, present, err := idempotencyKeyOf(r)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	if !present {
		res, err := run(ctx, "")
		s.writeResponse(w, r, res, err)
		return
	}
	k := admission.IdemKey(p.Name, scope, key)
	first, token, err := s.Store.Idem.Acquire(ctx, k, idemLockTTL)
	if err != nil {
		s.WriteError(w, r, fmt.Errorf("idempotency: acquire: %w", err))
		return
	}
	if first != nil {
		s.replay(w, r, first, hash)
		return
	}
	if token == "" {
		s.WriteError(w, r, &apiError{Kind: kindInFlight, Detail: "retry after the first request has been answered", RetryAfter: time.Second})
		return
	}
	var stored *state.Answer
	defer func() {
		// The lock is released even when the client has gone away.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := s.Store.Idem.Finish(ctx, k, token, stored); err != nil {
			s.Log.WarnContext(ctx, "idempotency: store answer", "err", err)
		}
	}()
	if s.Admit != nil {
		if err := s.Admit.ChargeKeyed(ctx, p.asSender()); err != nil { // admission.StepKeyed, after the replay
			s.WriteError(w, r, err)
			return
		}
	}
	res, err := run(ctx, key)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	body, err := marshalBody(res.body)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	if res.status >= 200 && res.status < 300 && !res.noStore {
		stored = compactAnswer(&state.Answer{Hash: hash, Status: res.status, Body: body, Location: res.location})
		if res.storeBudget > 0 && stored.Size() > res.storeBudget {
			stored = nil
			s.Metrics.AnswersNotKept.Inc()
		}
	}
	if res.replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if res.location != "" {
		w.Header().Set("Location", res.location)
	}
	writeRaw(w, "application/json", res.status, append(body, '\n'))
}

func (s *Server) replay(w http.ResponseWriter, r *http.Request, a *state.Answer, hash string) {
	if a.Hash != hash {
		s.WriteError(w, r, errorf(kindKeyReused, "this Idempotency-Key was first used with a different request; use a new key for a new request"))
		return
	}
	a, err := accepted.Expand(a)
	if err != nil {
		s.WriteError(w, r, fmt.Errorf("idempotency: stored answer: %w", err))
		return
	}
	body, err := state.AnswerBody(a)
	if err != nil {
		s.WriteError(w, r, fmt.Errorf("idempotency: stored answer: %w", err))
		return
	}
	s.Metrics.Replays.Inc()
	w.Header().Set("Idempotent-Replayed", "true")
	if a.Location != "" {
		w.Header().Set("Location", a.Location)
	}
	writeRaw(w, "application/json", a.Status, append(body, '\n'))
}

// compactAnswer is the form an answer is stored in: an accepted
// message's compact form (answerform.go), else state.CompactAnswer.
func compactAnswer(a *state.Answer) *state.Answer {
	if c := accepted.Compact(a); c != a {
		return c
	}
	return state.CompactAnswer(a)
}

func (s *Server) writeResponse(w http.ResponseWriter, r *http.Request, res *response, err error) {
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	if res.replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if res.location != "" {
		w.Header().Set("Location", res.location)
	}
	writeJSON(w, s.Log, "application/json", res.status, res.body)
}
