package gateway

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"smsgw/internal/sms"
)

type classStats struct {
	Ready            int64   `json:"ready"`
	Scheduled        int64   `json:"scheduled"`
	Leased           int64   `json:"leased"`
	Dead             int64   `json:"dead"`
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
}

type limiterKey struct {
	Name          string  `json:"name"`
	AheadMS       int64   `json:"ahead_ms"`
	RatePerSecond float64 `json:"rate_per_second"`
	Burst         int     `json:"burst"`
}

type limiterStats struct {
	Mode             string       `json:"mode"`
	PauseRemainingMS int64        `json:"pause_remaining_ms"`
	Keys             []limiterKey `json:"keys"`
}

type statsResponse struct {
	Classes map[string]classStats `json:"classes"`
	Limiter limiterStats          `json:"limiter"`
	Pause   PauseState            `json:"pause"`
}

func (s *server) adminStats(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	qs, err := s.queue.Stats(ctx)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("queue stats: %w", err))
		return
	}
	ls, err := s.limiter.State(ctx)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("limiter state: %w", err))
		return
	}
	out := statsResponse{Classes: map[string]classStats{}, Pause: s.pause.state()}
	for _, c := range sms.Classes {
		st := qs[c]
		out.Classes[c.String()] = classStats{Ready: st.Ready, Scheduled: st.Scheduled, Leased: st.Leased,
			Dead: st.Dead, OldestAgeSeconds: st.OldestAge.Seconds()}
	}
	out.Limiter = limiterStats{Mode: string(ls.Mode), PauseRemainingMS: ls.PauseRemaining.Milliseconds(), Keys: []limiterKey{}}
	for _, k := range ls.Keys {
		out.Limiter.Keys = append(out.Limiter.Keys, limiterKey{Name: k.Name, AheadMS: k.Ahead.Milliseconds(),
			RatePerSecond: k.Rate.PerSecond, Burst: k.Rate.Burst})
	}
	writeJSON(w, s.log, "application/json", http.StatusOK, out)
}

// MaxPause bounds an operator pause with a duration.
const MaxPause = 24 * time.Hour

func (s *server) adminPause(w http.ResponseWriter, r *http.Request) {
	raw, err := readBody(r, true)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req pauseRequest
	if raw != nil {
		if err := decodeStrict(raw, &req, ""); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	var d time.Duration
	if req.DurationSeconds != nil {
		v := *req.DurationSeconds
		if !(v >= 1 && v <= MaxPause.Seconds()) {
			s.writeError(w, r, fieldError("duration_seconds", fmt.Sprintf("must be between 1 and %d", int(MaxPause.Seconds()))))
			return
		}
		d = time.Duration(v * float64(time.Second))
	}
	if len(req.Reason) > 200 {
		s.writeError(w, r, fieldError("reason", "has at most 200 bytes"))
		return
	}
	if err := s.pause.Pause(r.Context(), d, req.Reason); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.WarnContext(r.Context(), "sending paused by operator", "duration", d, "reason", req.Reason, "client_ip", ClientIP(r.Context()))
	writeJSON(w, s.log, "application/json", http.StatusOK, s.pause.state())
}

func (s *server) adminResume(w http.ResponseWriter, r *http.Request) {
	if err := s.pause.Resume(r.Context()); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.WarnContext(r.Context(), "sending resumed by operator", "client_ip", ClientIP(r.Context()))
	writeJSON(w, s.log, "application/json", http.StatusOK, s.pause.state())
}

type deadLetter struct {
	messageView
	Producer string `json:"producer"`
}

type deadLettersResponse struct {
	Messages []deadLetter `json:"messages"`
}

const (
	defaultDeadLetters = 100
	maxDeadLetters     = 1000
)

// adminDeadLetters lists dead letters, oldest first, numbers masked: the
// operator needs the error and the producer, not the recipient.
func (s *server) adminDeadLetters(w http.ResponseWriter, r *http.Request) {
	limit := defaultDeadLetters
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxDeadLetters {
			s.writeError(w, r, fieldError("limit", fmt.Sprintf("must be an integer between 1 and %d", maxDeadLetters)))
			return
		}
		limit = n
	}
	ms, err := s.queue.DeadLetters(r.Context(), limit)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("dead letters: %w", err))
		return
	}
	out := deadLettersResponse{Messages: make([]deadLetter, 0, len(ms))}
	for _, m := range ms {
		v := viewOf(m)
		v.To = sms.MaskPhone(v.To)
		out.Messages = append(out.Messages, deadLetter{messageView: v, Producer: m.Producer})
	}
	writeJSON(w, s.log, "application/json", http.StatusOK, out)
}

type retriedResponse struct {
	ID     string     `json:"id"`
	Status sms.Status `json:"status"`
}

func (s *server) adminRetryDead(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if !sms.ValidID(id) {
		s.writeError(w, r, errorf(KindNotFound, "no such dead letter"))
		return
	}
	if err := s.queue.RetryDead(r.Context(), id); err != nil {
		s.writeError(w, r, fmt.Errorf("retry dead letter %s: %w", id, err))
		return
	}
	m, err := s.queue.Get(r.Context(), id)
	if err == nil {
		s.notify(m.Class)
	}
	w.Header().Set("Location", location(id))
	writeJSON(w, s.log, "application/json", http.StatusAccepted, retriedResponse{ID: id, Status: sms.StatusQueued})
}
