package sim

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"smsgw/internal/provider/httpprov"
	"smsgw/internal/sms"
)

const maxRequestBody = 64 << 10

// Handler serves the send, stats and control endpoints.
func (s *Sim) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /send", s.handleSend)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.Stats()) })
	mux.HandleFunc("GET /accepted", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.Accepted()) })
	mux.HandleFunc("POST /reset", func(w http.ResponseWriter, r *http.Request) {
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /control", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, s.controlState()) })
	mux.HandleFunc("POST /control", s.handleControl)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return mux
}

func (s *Sim) handleControl(w http.ResponseWriter, r *http.Request) {
	var c Control
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		writeJSON(w, http.StatusBadRequest, httpprov.ErrorResponse{Error: "control: " + err.Error()})
		return
	}
	if err := s.Apply(c); err != nil {
		writeJSON(w, http.StatusBadRequest, httpprov.ErrorResponse{Error: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, s.controlState())
}

func (s *Sim) handleSend(w http.ResponseWriter, r *http.Request) {
	arrived := s.now()
	var req httpprov.SendRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBody)).Decode(&req); err != nil {
		s.badRequest(w, "invalid JSON: "+err.Error())
		return
	}
	if req.To == "" || req.Body == "" {
		s.badRequest(w, "to and body are required")
		return
	}
	rec := Record{Arrived: arrived, Reference: req.Reference, To: req.To, From: req.From,
		Body: req.Body, Class: req.Class, Units: 1}
	rec.key = r.Header.Get(httpprov.HeaderIdempotencyKey)
	if rec.Reference == "" {
		rec.Reference = rec.key
	}
	if req.Segments > 1 && !s.cfg.IgnoreSegments {
		rec.Units = req.Segments
	}
	if v := r.Header.Get(httpprov.HeaderAcceptedAt); v != "" {
		if ns, err := strconv.ParseInt(v, 10, 64); err == nil && ns > 0 {
			rec.AcceptedAt = time.Unix(0, ns)
		}
	}

	f := s.faultsNow()
	if !s.wait(r.Context(), time.Duration(f.Latency)+jitter(f.LatencyJitter)) {
		return // the client gave up during the latency
	}
	switch {
	case roll(f.FailRate):
		s.count(func(c *counters) { c.failed5xx++ })
		status := f.FailStatus
		if status == 0 {
			status = DefaultFailStatus
		}
		writeJSON(w, status, httpprov.ErrorResponse{Error: "injected failure"})
		return
	case roll(f.TimeoutRate):
		s.count(func(c *counters) { c.timeouts++ })
		s.hang(r.Context())
		return
	}

	out, retry, rec := s.decide(rec)
	log := s.cfg.Logger
	switch out {
	case suspended:
		w.Header().Set("Retry-After", seconds(retry))
		writeJSON(w, http.StatusForbidden, httpprov.ErrorResponse{Error: "account suspended"})
	case throttled:
		log.Debug("sim: 429", "to", sms.MaskPhone(req.To), "reference", req.Reference)
		w.Header().Set("Retry-After", seconds(retry))
		writeJSON(w, http.StatusTooManyRequests, httpprov.ErrorResponse{Error: "rate limit exceeded"})
	case throttledSender:
		log.Debug("sim: 429 for the sender", "from", sms.MaskPhone(req.From), "reference", req.Reference)
		w.Header().Set("Retry-After", seconds(retry))
		writeJSON(w, http.StatusTooManyRequests, httpprov.ErrorResponse{Error: "sender rate limit exceeded",
			Scope: httpprov.ScopeSender})
	case replayed:
		log.Debug("sim: idempotent replay", "reference", req.Reference, "id", rec.ID)
		writeJSON(w, http.StatusOK, httpprov.SendResponse{ID: rec.ID})
	case accepted:
		log.Debug("sim: accepted", "to", sms.MaskPhone(req.To), "reference", req.Reference, "id", rec.ID, "units", rec.Units)
		if p := s.rcpt.Load(); p != nil && rec.Receipt != "" {
			if p.early() {
				p.postNow(r.Context(), rec)
			} else {
				p.later(rec)
			}
		}
		if roll(f.LostReplyRate) {
			s.count(func(c *counters) { c.lostReplies++ })
			s.hang(r.Context())
			return
		}
		writeJSON(w, http.StatusOK, httpprov.SendResponse{ID: rec.ID})
	}
}

func (s *Sim) badRequest(w http.ResponseWriter, msg string) {
	s.count(func(c *counters) { c.badRequests++ })
	writeJSON(w, http.StatusBadRequest, httpprov.ErrorResponse{Error: msg})
}

// seconds formats a pause as a Retry-After value, rounded up so a client
// that honours it never comes back early.
func seconds(d time.Duration) string {
	return strconv.FormatInt(int64(math.Ceil(d.Seconds())), 10)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // a failed write means the client went away
}
