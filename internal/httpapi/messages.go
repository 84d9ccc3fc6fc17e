package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"smsgw/internal/admission"
	"smsgw/internal/httpapi/accepted"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// MaxBatch is the most messages one batch may hold.
const MaxBatch = 1000

// AcceptedMessage is the 202 body of POST /v1/messages and of each
// accepted batch item (accepted.Message).
type AcceptedMessage = accepted.Message

// MessageView is GET /v1/messages/{id}.
type MessageView struct {
	ID                string     `json:"id"`
	Status            sms.Status `json:"status"`
	Class             sms.Class  `json:"class"`
	To                string     `json:"to"`
	From              string     `json:"from,omitempty"`
	Reference         string     `json:"reference,omitempty"`
	CallbackURL       string     `json:"callback_url,omitempty"`
	Segments          int        `json:"segments"`
	Attempts          int        `json:"attempts"`
	LastError         string     `json:"last_error,omitempty"`
	ProviderMessageID string     `json:"provider_message_id,omitempty"`
	CreatedAt         time.Time  `json:"created_at"`
	SendAt            *time.Time `json:"send_at,omitempty"`
	UpdatedAt         *time.Time `json:"updated_at,omitempty"`
	SentAt            *time.Time `json:"sent_at,omitempty"`
	ExpiresAt         *time.Time `json:"expires_at,omitempty"`
	BatchID           string     `json:"batch_id,omitempty"`
}

// viewOf is m as a reader sees it at now (a queued message before its
// send_at reads scheduled).
func viewOf(m *sms.Message, now time.Time) MessageView {
	st := m.StatusAt(now)
	if st == "" {
		st = sms.StatusUnknown
	}
	return MessageView{
		ID: m.ID, Status: st, Class: m.Class, To: m.To, From: m.From, Reference: m.Reference,
		CallbackURL: m.CallbackURL, Segments: accepted.Segments(m).Count, Attempts: m.Attempts, LastError: m.LastError,
		ProviderMessageID: m.ProviderID, CreatedAt: m.CreatedAt.UTC(), SendAt: accepted.OptTime(m.SendAt),
		UpdatedAt: accepted.OptTime(m.UpdatedAt), SentAt: accepted.OptTime(m.SentAt), ExpiresAt: accepted.OptTime(m.ExpiresAt),
		BatchID: m.BatchID,
	}
}

func location(id string) string { return accepted.Location(id) }

// invalid builds the 400 for a list of field errors.
func invalid(errs []fieldProblem) *apiError {
	parts := make([]string, 0, len(errs))
	for _, e := range errs {
		parts = append(parts, e.Field+": "+e.Reason)
	}
	return &apiError{Kind: KindInvalid, Detail: strings.Join(parts, "; "), Fields: errs}
}

// checkMessage decodes and validates one message request; the error is a
// 400 (every bad field) or a 403 (class not allowed for the producer).
func (s *Server) checkMessage(p *Producer, raw []byte, prefix string) (validated, error) {
	var req messageRequest
	if err := decodeStrict(raw, &req, prefix); err != nil {
		return validated{}, err
	}
	class, ferr := parseClass(req.Class, prefix)
	asked := req.From
	req.From, _ = p.sender(req.From, "") // the default sender when none is named
	v, errs := s.validateMessage(&req, class, prefix)
	errs = append(errs, p.bodyControls(req.Body, prefix)...)
	if ferr != nil {
		errs = append([]fieldProblem{*ferr}, errs...)
	}
	if len(errs) > 0 {
		return validated{}, invalid(errs)
	}
	if !p.allowed(class) {
		return validated{}, errorf(kindForbidden, fmt.Sprintf("producer %s may not send class %s", p.Name, class))
	}
	if err := checkCallback(p, v.msg, prefix); err != nil {
		return validated{}, err
	}
	if _, err := p.sender(asked, prefix+"from"); err != nil {
		return validated{}, err
	}
	return v, nil
}

func (s *Server) postMessage(w http.ResponseWriter, r *http.Request) {
	p := producerFrom(r.Context())
	raw, err := readBody(r, false)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	v, err := s.checkMessage(p, raw, "")
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	if s.Admit.Scripted() && v.msg.Class != sms.ClassOTP {
		// The script executor keeps the first answer with the message.
		s.acceptScripted(w, r, p, v)
		return
	}
	s.idempotent(w, r, p, "message", v.msg.RequestHash, func(ctx context.Context, key string) (*response, error) {
		return s.accept(ctx, w, p, v, key)
	})
}

// accept admits one message on the in-process executor, inside the
// answer store's lock of its Idempotency-Key (idempotent).
func (s *Server) accept(ctx context.Context, w http.ResponseWriter, p *Producer, v validated, key string) (*response, error) {
	now := s.Now()
	d, err := s.Admit.AdmitOne(ctx, admission.One{Sender: p.asSender(), Msg: v.msg, TTL: v.ttl, Key: key}, now)
	s.admitted(w, p, d, err)
	switch {
	case err != nil:
		return nil, err
	case d.Existing != nil:
		return s.existing(d.Existing, d.Msg, d.ETA, now)
	}
	s.stored(d.Msg)
	return &response{status: http.StatusAccepted, body: accepted.Of(d.Msg, d.ETA, now), location: location(d.Msg.ID)}, nil
}

// admitted does what the HTTP layer owes every admission, refused or not:
// the RateLimit headers when the ingress GCRA ran, and a refusal by it
// noted for the body gate.
func (s *Server) admitted(w http.ResponseWriter, p *Producer, d admission.Decision, err error) {
	if d.Ingress != nil {
		setRateLimitHeaders(w, p.Ingress, *d.Ingress)
	}
	if err == nil {
		return
	}
	var rj *admission.Rejection
	if errors.As(err, &rj) && rj.Kind == admission.RejectRateLimited {
		s.Edge.BodyGate.refusedFor(p, rj.RetryAfter, time.Now())
	}
}

// stored counts a message just stored and wakes the send loop for it.
func (s *Server) stored(m *sms.Message) {
	s.notify(m.Class)
	s.Metrics.Accepted.WithLabelValues(m.Class.String()).Inc()
}

// existing answers a request whose Idempotency-Key the queue already knew
// but whose first answer was not in the answer store.
func (s *Server) existing(first, m *sms.Message, eta, now time.Time) (*response, error) {
	if !queue.SameRequest(first.RequestHash, m.RequestHash) {
		return nil, errorf(kindKeyReused, "this Idempotency-Key was first used with a different request; use a new key for a new request")
	}
	s.Metrics.Replays.Inc()
	return &response{status: http.StatusAccepted, body: accepted.Of(first, eta, now), location: location(first.ID), replayed: true}, nil
}

// checkCallback refuses a callback_url under none of the producer's
// webhook.allow prefixes (422 naming the field; the URL itself is not
// repeated: it may carry a token).
func checkCallback(p *Producer, m *sms.Message, prefix string) error {
	if m.CallbackURL == "" || p.callbackAllowed(m.CallbackURL) {
		return nil
	}
	reason := "is not under any of the producer's webhook.allow prefixes"
	return &apiError{Kind: KindCallbackNotAllowed, Detail: prefix + "callback_url: " + reason,
		Fields: []fieldProblem{{prefix + "callback_url", reason}}}
}

func (s *Server) notify(c sms.Class) {
	if s.Dispatch != nil {
		s.Dispatch.Notify(c)
	}
}

// lookup reads the message named by the {id} route parameter, answering
// 404 for a malformed or unknown id; ok is false when it has answered.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) (*sms.Message, bool) {
	id := chi.URLParam(r, "id")
	if !sms.ValidID(id) {
		s.WriteError(w, r, errorf(KindNotFound, "no such message"))
		return nil, false
	}
	m, err := s.Store.Queue.Get(r.Context(), id)
	if err != nil {
		s.WriteError(w, r, fmt.Errorf("get %s: %w", id, err))
		return nil, false
	}
	return m, true
}

func (s *Server) getMessage(w http.ResponseWriter, r *http.Request) {
	p := producerFrom(r.Context())
	m, ok := s.lookup(w, r)
	if !ok {
		return
	}
	if m.Producer != p.Name {
		// The same answer as a missing id: ids of others are not revealed.
		s.WriteError(w, r, errorf(KindNotFound, "no such message"))
		return
	}
	writeJSON(w, s.Log, "application/json", http.StatusOK, viewOf(m, s.Now()))
}

// batchItem is the result of one batch item: Message when accepted,
// Error (a problem) when not. Status is the HTTP status the item would
// have had on its own.
type batchItem struct {
	Index   int              `json:"index"`
	Status  int              `json:"status"`
	Message *AcceptedMessage `json:"message,omitempty"`
	Error   *problem         `json:"error,omitempty"`
}

// BatchResponse is the answer of POST /v1/messages/batch.
type BatchResponse struct {
	BatchID  string      `json:"batch_id,omitempty"` // GET, DELETE /v1/batches/{id}; none when nothing was accepted
	Accepted int         `json:"accepted"`
	Rejected int         `json:"rejected"`
	Results  []batchItem `json:"results"`
}

func (s *Server) postBatch(w http.ResponseWriter, r *http.Request) {
	p := producerFrom(r.Context())
	if err := checkJSONContentType(r.Header.Get("Content-Type")); err != nil {
		s.WriteError(w, r, err)
		return
	}
	// Item by item as the body arrives (decodebatch.go): only the checked
	// messages are kept, not the body.
	var (
		items []batchItem
		vs    []validated
	)
	hash, budget := newPartsHash(), newReadBudget(w, s.Cfg.HTTP.ReadTimeout)
	n, err := streamBatch(r.Body, func(i int, rawItem json.RawMessage) {
		items, vs = append(items, batchItem{Index: i}), append(vs, validated{})
		budget.spend(func() {
			v, err := s.checkMessage(p, rawItem, "messages["+strconv.Itoa(i)+"].")
			if err != nil {
				s.itemError(r, &items[i], err)
				hash.add(rawItem)
				return
			}
			vs[i] = v
			hash.add([]byte(v.msg.RequestHash))
		})
	})
	if err == nil && n == 0 {
		err = fieldError("messages", fmt.Sprintf("must hold 1 to %d messages (got 0)", MaxBatch))
	}
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	s.idempotent(w, r, p, "batch", hash.sum(), func(ctx context.Context, key string) (*response, error) {
		return s.acceptBatch(ctx, w, r, p, vs, items, key)
	})
}

func (s *Server) itemError(r *http.Request, it *batchItem, err error) {
	pr, _ := s.problemOf(r, err)
	it.Status, it.Error, it.Message = pr.Status, &pr, nil
}

// acceptBatch admits the valid items (admission.Pipeline.AdmitBatch) and
// answers each item: its message, or its own problem. When none fits the
// whole batch is a 429, so a client simply retries it later.
func (s *Server) acceptBatch(ctx context.Context, w http.ResponseWriter, r *http.Request, p *Producer,
	vs []validated, items []batchItem, key string) (*response, error) {
	now := s.Now()
	b := admission.Batch{Sender: p.asSender(), Key: key, Msgs: make([]*sms.Message, len(vs)), TTLs: make([]time.Duration, len(vs)),
		BatchID: sms.NewBatchID(now)}
	for i, v := range vs {
		b.Msgs[i], b.TTLs[i] = v.msg, v.ttl
	}
	adm, d, err := s.Admit.AdmitBatch(ctx, b, now)
	if d != nil {
		setRateLimitHeaders(w, p.Ingress, *d)
	}
	var rj *admission.Rejection
	if errors.As(err, &rj) && rj.Kind == admission.RejectRateLimited && d != nil {
		s.Edge.BodyGate.refused(p, *d, time.Now())
	}
	if err != nil {
		return nil, err
	}
	notified := map[sms.Class]bool{}
	out := BatchResponse{Results: items}
	for i := range adm {
		it := &adm[i]
		switch {
		case b.Msgs[i] == nil: // refused when decoded
		case it.Err != nil:
			s.itemError(r, &items[i], it.Err)
		case it.Existing != nil:
			out.BatchID = cmp.Or(out.BatchID, it.Existing.BatchID) // a retried batch: its first answer's id
			rr, err := s.existing(it.Existing, it.Msg, it.ETA, now)
			if err != nil {
				s.itemError(r, &items[i], err)
				break
			}
			am := rr.body.(AcceptedMessage)
			items[i].Status, items[i].Message = http.StatusAccepted, &am
		default:
			out.BatchID = b.BatchID
			am := accepted.Of(it.Msg, it.ETA, now)
			items[i].Status, items[i].Message = http.StatusAccepted, &am
			s.Metrics.Accepted.WithLabelValues(it.Msg.Class.String()).Inc()
			if !notified[it.Msg.Class] {
				notified[it.Msg.Class] = true
				s.notify(it.Msg.Class)
			}
		}
	}
	for _, it := range items {
		if it.Message != nil {
			out.Accepted++
		} else {
			out.Rejected++
		}
	}
	return &response{status: http.StatusOK, body: out, noStore: out.Accepted == 0, storeBudget: answerBytesPerAccepted * out.Accepted}, nil
}

// deleteMessage is DELETE /v1/messages/{id}: the producer cancels its own
// queued or scheduled message. Another producer's id reads as missing; a
// message sending or done is 409 not-cancelable. Whether a cancel racing
// the send loop's take wins is decided in one atomic step of the queue.
func (s *Server) deleteMessage(w http.ResponseWriter, r *http.Request) {
	p := producerFrom(r.Context())
	id := chi.URLParam(r, "id")
	if !sms.ValidID(id) {
		s.WriteError(w, r, errorf(KindNotFound, "no such message"))
		return
	}
	m, err := s.Store.Queue.Cancel(r.Context(), id, p.Name)
	switch {
	case errors.Is(err, queue.ErrNotCancelable) && m != nil:
		s.WriteError(w, r, errorf(kindNotCancelable, "the message is "+string(m.StatusAt(s.Now()))+" and can no longer be canceled"))
		return
	case err != nil:
		s.WriteError(w, r, err)
		return
	}
	writeJSON(w, s.Log, "application/json", http.StatusOK, viewOf(m, s.Now()))
}
