package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"smsgw/internal/admission"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// The suppression list's admin API. An entry is shown by its id (the
// number's keyed hash, stable across replicas and restarts) and the masked
// number, never the number: an operator adds and removes by number, and
// lists without learning any.

type suppressionRequest struct {
	To     string `json:"to"`
	Reason string `json:"reason"`
}

// SuppressionView is one suppression list entry as the admin API shows it.
type SuppressionView struct {
	ID        string    `json:"id"`
	To        string    `json:"to"` // masked
	Reason    string    `json:"reason"`
	Source    string    `json:"source"` // operator, recipient or provider
	CreatedAt time.Time `json:"created_at"`
}

// SuppressionList is the answer of GET /v1/admin/suppressions.
type SuppressionList struct {
	Suppressions []SuppressionView `json:"suppressions"`
	Total        int               `json:"total"`
	Next         string            `json:"next,omitempty"` // the after of the next page
}

const (
	defaultSuppressionPage = 100
	maxReasonDigits        = 5 // a longer run of digits could be a number
)

func viewOfSuppression(e state.Suppression) SuppressionView {
	return SuppressionView{ID: e.ID, To: e.Masked, Reason: e.Reason, Source: string(e.Source.OrOperator()), CreatedAt: e.CreatedAt.UTC()}
}

// checkReason refuses an operator's reason (a suppression's, a pause's)
// over maxLen bytes or one that could hold a phone number (a run of more
// than maxReasonDigits digits): the answers and the logs that show it must
// never show one.
func checkReason(reason string, maxLen int) *apiError {
	if len(reason) > maxLen {
		return fieldError("reason", fmt.Sprintf("has at most %d bytes", maxLen))
	}
	run := 0
	for i := 0; i < len(reason); i++ {
		if c := reason[i]; c >= '0' && c <= '9' {
			if run++; run > maxReasonDigits {
				return fieldError("reason", fmt.Sprintf("must not hold a run of more than %d digits (no phone numbers)", maxReasonDigits))
			}
			continue
		}
		run = 0
	}
	return nil
}

func (s *Server) adminAddSuppression(w http.ResponseWriter, r *http.Request) {
	raw, err := readBody(r, false)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	var req suppressionRequest
	if err := decodeStrict(raw, &req, ""); err != nil {
		s.WriteError(w, r, err)
		return
	}
	to, err := sms.ParseE164(req.To)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	if e := checkReason(req.Reason, state.MaxSuppressionReason); e != nil {
		s.WriteError(w, r, e)
		return
	}
	id, err := s.Ops.SuppressionID(r.Context(), to)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	e := state.Suppression{ID: id, Masked: sms.MaskPhone(to), Reason: req.Reason, CreatedAt: s.Now().UTC().Truncate(time.Second),
		Source: state.SourceOperator}
	added, err := s.Ops.Suppressions().Add(r.Context(), e)
	switch {
	case errors.Is(err, state.ErrSuppressionsFull):
		s.WriteError(w, r, &apiError{Kind: KindSuppressionsFull, Err: err,
			Detail: fmt.Sprintf("the list holds protection.max_suppressions (%d) entries; remove some first", s.Cfg.Protection.MaxSuppressions)})
		return
	case err != nil:
		s.WriteError(w, r, admission.SuppressionsUnavailable(err))
		return
	}
	status := http.StatusOK
	if added {
		status = http.StatusCreated
		s.Log.InfoContext(r.Context(), "number suppressed by operator", "suppression_id", id, "to", e.Masked,
			"client_ip", clientIP(r.Context()))
	}
	w.Header().Set("Location", "/v1/admin/suppressions/"+id)
	writeJSON(w, s.Log, "application/json", status, viewOfSuppression(e))
}

// adminRemoveSuppression takes the number (E.164, '+' as is or %2B) or the
// entry's id from the path.
func (s *Server) adminRemoveSuppression(w http.ResponseWriter, r *http.Request) {
	// chi matches on the escaped path when it has one: "%2B8190..." comes
	// here as written.
	arg, err := url.PathUnescape(chi.URLParam(r, "number"))
	if err != nil {
		s.WriteError(w, r, fieldError("number", "must be an E.164 number or a suppression id"))
		return
	}
	id := arg
	if arg != "" && (arg[0] == '+' || arg[0] == ' ') { // a '+' some clients send as a space
		to, err := sms.ParseE164("+" + arg[1:])
		if err != nil {
			s.WriteError(w, r, fieldError("number", "must be an E.164 number or a suppression id"))
			return
		}
		if id, err = s.Ops.SuppressionID(r.Context(), to); err != nil {
			s.WriteError(w, r, err)
			return
		}
	} else if !state.ValidKey(arg) {
		s.WriteError(w, r, fieldError("number", "must be an E.164 number or a suppression id"))
		return
	}
	removed, err := s.Ops.Suppressions().Remove(r.Context(), id)
	if err != nil {
		s.WriteError(w, r, admission.SuppressionsUnavailable(err))
		return
	}
	if !removed {
		s.WriteError(w, r, errorf(KindNotFound, "the number is not on the suppression list"))
		return
	}
	s.Log.InfoContext(r.Context(), "number unsuppressed by operator", "suppression_id", id, "client_ip", clientIP(r.Context()))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) adminListSuppressions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := defaultSuppressionPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > state.MaxSuppressionPage {
			s.WriteError(w, r, fieldError("limit", fmt.Sprintf("must be an integer between 1 and %d", state.MaxSuppressionPage)))
			return
		}
		limit = n
	}
	after := q.Get("after")
	if after != "" && !state.ValidKey(after) {
		s.WriteError(w, r, fieldError("after", "must be the next of a previous page"))
		return
	}
	page, err := s.Ops.Suppressions().List(r.Context(), after, limit)
	if err != nil {
		s.WriteError(w, r, admission.SuppressionsUnavailable(err))
		return
	}
	total, err := s.Ops.Suppressions().Count(r.Context())
	if err != nil {
		s.WriteError(w, r, admission.SuppressionsUnavailable(err))
		return
	}
	out := SuppressionList{Suppressions: make([]SuppressionView, 0, len(page)), Total: total}
	for _, e := range page {
		out.Suppressions = append(out.Suppressions, viewOfSuppression(e))
	}
	if len(page) == limit {
		out.Next = page[len(page)-1].ID
	}
	writeJSON(w, s.Log, "application/json", http.StatusOK, out)
}
