package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"smsgw/internal/admission"
	"smsgw/internal/sms"
)

// adminStats answers what this replica could read (opsview.Desk.Stats):
// 200 with the sections the store answered for and the names of the
// others in unavailable, so that during an outage the operator still sees
// the limiter, the pause, OTP latency and the provider from this replica.
func (s *Server) adminStats(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	out, missing, err := s.Ops.Stats(ctx)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	if len(out.Unavailable) > 0 && ctx.Err() == nil {
		// One line per answer; the errors are the store's (addresses,
		// timeouts), never a number, a body or a key.
		s.Log.WarnContext(ctx, "stats: answered without what the store could not give", "unavailable", out.Unavailable,
			"request_id", middleware.GetReqID(ctx), "err", missing)
	}
	writeJSON(w, s.Log, "application/json", http.StatusOK, out)
}

// adminGetMessage is any message's status, number masked: the operator
// looks a message up by id without learning the recipient.
func (s *Server) adminGetMessage(w http.ResponseWriter, r *http.Request) {
	if m, ok := s.lookup(w, r); ok {
		writeJSON(w, s.Log, "application/json", http.StatusOK, adminView(m, s.Now()))
	}
}

// maxPause bounds an operator pause with a duration.
const maxPause = 24 * time.Hour

// maxPauseReason bounds an operator pause's reason (logged, shown in the
// stats and on the dashboard).
const maxPauseReason = 200

// decodeOptional reads an optional JSON body into v; false when it
// answered the problem.
func (s *Server) decodeOptional(w http.ResponseWriter, r *http.Request, v any) bool {
	raw, err := readBody(r, true)
	if err == nil && raw != nil {
		err = decodeStrict(raw, v, "")
	}
	if err != nil {
		s.WriteError(w, r, err)
		return false
	}
	return true
}

func (s *Server) adminPause(w http.ResponseWriter, r *http.Request) {
	var req pauseRequest
	if !s.decodeOptional(w, r, &req) {
		return
	}
	var d time.Duration
	if req.DurationSeconds != nil {
		v := *req.DurationSeconds
		if !(v >= 1 && v <= maxPause.Seconds()) {
			s.WriteError(w, r, fieldError("duration_seconds", fmt.Sprintf("must be between 1 and %d", int(maxPause.Seconds()))))
			return
		}
		d = time.Duration(v * float64(time.Second))
	}
	if e := checkReason(req.Reason, maxPauseReason); e != nil {
		s.WriteError(w, r, e)
		return
	}
	sc, e := s.pauseScope(req.Class, req.Producer)
	if e != nil {
		s.WriteError(w, r, e)
		return
	}
	if sc != nil {
		if err := s.Ops.PauseScope(r.Context(), *sc, d, req.Reason); err != nil {
			s.WriteError(w, r, err)
			return
		}
		s.Log.WarnContext(r.Context(), "part of the sending paused by operator", "class", sc.Class, "producer", sc.Producer,
			"duration", d, "reason", req.Reason, "client_ip", clientIP(r.Context()))
		writeJSON(w, s.Log, "application/json", http.StatusOK, s.Ops.State())
		return
	}
	if err := s.Ops.Pause(r.Context(), d, req.Reason); err != nil {
		s.WriteError(w, r, err)
		return
	}
	s.Log.WarnContext(r.Context(), "sending paused by operator", "duration", d, "reason", req.Reason, "client_ip", clientIP(r.Context()))
	writeJSON(w, s.Log, "application/json", http.StatusOK, s.Ops.State())
}

// pauseScope is the scope a pause or resume names (nil: everything), or
// the problem naming the field: a class of the gateway's, or a producer of
// its configuration, not both.
func (s *Server) pauseScope(class, producer *string) (*admission.Scope, *apiError) {
	switch {
	case class != nil && producer != nil:
		return nil, fieldError("producer", "name a class or a producer, not both")
	case class != nil:
		c, err := sms.ParseClass(*class)
		if err != nil {
			return nil, fieldError("class", "must be otp, transactional or marketing")
		}
		return &admission.Scope{Class: c.String()}, nil
	case producer != nil:
		for _, p := range s.Cfg.Producers {
			if p.Name == *producer {
				return &admission.Scope{Producer: p.Name}, nil
			}
		}
		return nil, fieldError("producer", "must name a configured producer")
	}
	return nil, nil
}

func (s *Server) adminResume(w http.ResponseWriter, r *http.Request) {
	var req resumeRequest
	if !s.decodeOptional(w, r, &req) {
		return
	}
	sc, e := s.pauseScope(req.Class, req.Producer)
	if e != nil {
		s.WriteError(w, r, e)
		return
	}
	if sc != nil {
		if err := s.Ops.ResumeScope(r.Context(), *sc); err != nil {
			s.WriteError(w, r, err)
			return
		}
		s.Log.WarnContext(r.Context(), "part of the sending resumed by operator", "class", sc.Class, "producer", sc.Producer,
			"client_ip", clientIP(r.Context()))
		writeJSON(w, s.Log, "application/json", http.StatusOK, s.Ops.State())
		return
	}
	if err := s.Ops.Resume(r.Context()); err != nil {
		s.WriteError(w, r, err)
		return
	}
	s.Log.WarnContext(r.Context(), "sending resumed by operator", "client_ip", clientIP(r.Context()))
	writeJSON(w, s.Log, "application/json", http.StatusOK, s.Ops.State())
}

// AdminMessage is a message as an operator sees it: the recipient masked,
// the callback_url cut to its scheme and host, the producer named.
type AdminMessage struct {
	MessageView
	Producer string `json:"producer"`
}

func adminView(m *sms.Message, now time.Time) AdminMessage {
	v := viewOf(m, now)
	v.To = sms.MaskPhone(v.To)
	v.CallbackURL = callbackOrigin(v.CallbackURL)
	return AdminMessage{MessageView: v, Producer: m.Producer}
}

// callbackOrigin is what an operator sees of a callback_url: its scheme
// and host ("https://notify.example"), never its path or query, which may
// carry the producer's token (the producer's own GET shows it whole).
func callbackOrigin(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "" // not one the gateway accepts; show nothing rather than the text
	}
	return u.Scheme + "://" + u.Host
}

// DeadLettersResponse is the answer of GET /v1/admin/dead-letters.
type DeadLettersResponse struct {
	Messages []AdminMessage `json:"messages"`
}

const (
	defaultDeadLetters = 100
	maxDeadLetters     = 1000
)

// listLimit reads the limit query parameter of the admin lists (dead
// letters, dead callbacks): defaultDeadLetters when absent.
func listLimit(r *http.Request) (int, *apiError) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return defaultDeadLetters, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxDeadLetters {
		return 0, fieldError("limit", fmt.Sprintf("must be an integer between 1 and %d", maxDeadLetters))
	}
	return n, nil
}

// adminDeadLetters lists dead letters, oldest first, numbers masked: the
// operator needs the error and the producer, not the recipient.
func (s *Server) adminDeadLetters(w http.ResponseWriter, r *http.Request) {
	limit, perr := listLimit(r)
	if perr != nil {
		s.WriteError(w, r, perr)
		return
	}
	ms, err := s.Store.Queue.DeadLetters(r.Context(), limit)
	if err != nil {
		s.WriteError(w, r, fmt.Errorf("dead letters: %w", err))
		return
	}
	out := DeadLettersResponse{Messages: make([]AdminMessage, 0, len(ms))}
	for _, m := range ms {
		out.Messages = append(out.Messages, adminView(m, s.Now()))
	}
	writeJSON(w, s.Log, "application/json", http.StatusOK, out)
}

type retriedResponse struct {
	ID     string     `json:"id"`
	Status sms.Status `json:"status"`
}

func (s *Server) adminRetryDead(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if !sms.ValidID(id) {
		s.WriteError(w, r, errorf(KindNotFound, "no such dead letter"))
		return
	}
	if err := s.Store.Queue.RetryDead(r.Context(), id); err != nil {
		s.WriteError(w, r, fmt.Errorf("retry dead letter %s: %w", id, err))
		return
	}
	m, err := s.Store.Queue.Get(r.Context(), id)
	if err == nil {
		s.notify(m.Class)
	}
	w.Header().Set("Location", location(id))
	writeJSON(w, s.Log, "application/json", http.StatusAccepted, retriedResponse{ID: id, Status: sms.StatusQueued})
}
