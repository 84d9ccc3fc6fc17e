package httpapi

import (
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
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// MaxBatch is the most messages one batch may hold.
const MaxBatch = 1000

// AcceptedMessage is the 202 body of POST /v1/messages and of each
// accepted batch item.
type AcceptedMessage struct {
	ID              string     `json:"id"`
	Status          sms.Status `json:"status"`
	Class           sms.Class  `json:"class"`
	Segments        int        `json:"segments"`
	Encoding        string     `json:"encoding"`
	EstimatedSendAt time.Time  `json:"estimated_send_at"`
	SendAt          *time.Time `json:"send_at,omitempty"`
	ExpiresAt       *time.Time `json:"expires_at,omitempty"`
}

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
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
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
		CallbackURL: m.CallbackURL, Segments: segmentsOf(m).Count, Attempts: m.Attempts, LastError: m.LastError,
		ProviderMessageID: m.ProviderID, CreatedAt: m.CreatedAt.UTC(), SendAt: optTime(m.SendAt),
		UpdatedAt: optTime(m.UpdatedAt), SentAt: optTime(m.SentAt), ExpiresAt: optTime(m.ExpiresAt),
	}
}

// segmentsOf is how m is sent: from its body, or what a final record (no
// body) kept of it.
func segmentsOf(m *sms.Message) sms.Segments {
	if m.Body == "" && m.Encoding != "" {
		return sms.Segments{Count: m.Segments, Encoding: m.Encoding}
	}
	return sms.CountSegments(m.Body)
}

// acceptedOf is the 202 body for m, just stored (queued, or scheduled
// before its send_at).
func acceptedOf(m *sms.Message, eta, now time.Time) AcceptedMessage {
	seg := segmentsOf(m)
	if nb := m.NotBefore; nb.After(eta) {
		eta = nb
	}
	stored := sms.Message{Status: sms.StatusQueued, SendAt: m.SendAt}
	return AcceptedMessage{
		ID: m.ID, Status: stored.StatusAt(now), Class: m.Class, Segments: seg.Count, Encoding: string(seg.Encoding),
		EstimatedSendAt: eta.UTC().Truncate(time.Millisecond), SendAt: optTime(m.SendAt), ExpiresAt: optTime(m.ExpiresAt),
	}
}

func location(id string) string { return "/v1/messages/" + id }

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
	if s.OneTrip != nil && v.msg.Class != sms.ClassOTP {
		s.acceptOneTrip(w, r, p, v)
		return
	}
	s.idempotent(w, r, p, "message", v.msg.RequestHash, func(ctx context.Context, key string) (*response, error) {
		return s.accept(ctx, w, p, v, key)
	})
}

// accept runs admission for one message and queues it.
func (s *Server) accept(ctx context.Context, w http.ResponseWriter, p *Producer, v validated, key string) (_ *response, err error) {
	now := s.Now()
	if ferr := checkSendAt(v.msg.SendAt, now, ""); ferr != nil {
		return nil, invalid([]fieldProblem{*ferr})
	}
	numberID, held, err := s.protectOne(ctx, v.msg.Class, v.msg.To)
	if err != nil {
		return nil, err
	}
	queued := false
	defer func() {
		if !queued { // refused, or an earlier message answered: it does not count against its number
			held.GiveBack(ctx, s.Log)
		}
	}()
	if _, err := s.admitOutstanding(ctx, p, 1); err != nil {
		return nil, err
	}
	m := s.stamp(v, p, key, now)
	m.NumberID = numberID // a take checks the suppression list again with it
	eta := s.ETA.Plan(ctx, now, []*sms.Message{m}, nil)[0]
	if err := admission.AdmitTTL(m, eta, v.ttl); err != nil {
		return nil, err
	}
	if _, err := s.admitIngress(ctx, w, p, 1); err != nil {
		return nil, err
	}
	res, err := s.Enq.Enqueue(ctx, m)
	if err != nil {
		queued = maybeStored(err) // then the number's OTP count keeps it
		return nil, enqueueError(err, m.ID)
	}
	if res.Existed {
		return s.existing(res.Message, m, eta, now)
	}
	queued = true
	s.ETA.Accepted(now, m)
	s.notify(m.Class)
	s.Metrics.Accepted.WithLabelValues(m.Class.String()).Inc()
	return &response{status: http.StatusAccepted, body: acceptedOf(m, eta, now), location: location(m.ID)}, nil
}

// maybeStored reports whether a failed enqueue may have stored its
// messages after all (they are then sent).
func maybeStored(err error) bool {
	return errors.Is(err, queue.ErrMaybeStored) || errors.Is(err, queue.ErrNotReplicated)
}

// enqueueError is the answer to a failed enqueue of the message id: one
// the store may have stored names the id it has then.
func enqueueError(err error, id string) error {
	err = fmt.Errorf("enqueue: %w", err)
	if maybeStored(err) {
		return &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err, Extra: map[string]any{"id": id}, Detail: maybeQueuedDetail}
	}
	return err
}

// existing answers a request whose Idempotency-Key the queue already knew
// but whose first answer was not in the answer store.
func (s *Server) existing(first, m *sms.Message, eta, now time.Time) (*response, error) {
	if !queue.SameRequest(first.RequestHash, m.RequestHash) {
		return nil, errorf(kindKeyReused, "this Idempotency-Key was first used with a different request; use a new key for a new request")
	}
	s.Metrics.Replays.Inc()
	return &response{status: http.StatusAccepted, body: acceptedOf(first, eta, now), location: location(first.ID), replayed: true}, nil
}

// stamp makes the validated request a message of producer p, accepted at
// now: due at its send_at (or now), not taken before the end of its
// class's quiet hours for the recipient, expiring its TTL after it is due.
func (s *Server) stamp(v validated, p *Producer, key string, now time.Time) *sms.Message {
	m := *v.msg
	m.ID = sms.NewID(now)
	m.Producer = p.Name
	m.IdempotencyKey = key
	m.CreatedAt = now.UTC()
	m.Callbacks = p.webhook || m.CallbackURL != ""
	due := now
	if m.SendAt.After(now) {
		due = m.SendAt
		m.NotBefore = due
	}
	if hold := s.Quiet.Hold(&m, due); !hold.IsZero() {
		m.NotBefore = hold.UTC()
	}
	if v.ttl > 0 {
		m.ExpiresAt = due.Add(v.ttl).UTC()
	}
	return &m
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
	if s.Notifier != nil {
		s.Notifier.Notify(c)
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
	m, err := s.Queue.Get(r.Context(), id)
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
		valid []int
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
			valid = append(valid, i)
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
		return s.acceptBatch(ctx, w, r, p, vs, valid, items, key)
	})
}

func (s *Server) itemError(r *http.Request, it *batchItem, err error) {
	pr, _ := s.problemOf(r, err)
	it.Status, it.Error, it.Message = pr.Status, &pr, nil
}

// acceptBatch admits the valid items: those that would expire before their
// turn are refused one by one; then as many as max_outstanding and the
// ingress quota allow, in order; the rest get 429. When none fits the
// whole batch is a 429, so a client simply retries it later.
func (s *Server) acceptBatch(ctx context.Context, w http.ResponseWriter, r *http.Request, p *Producer,
	vs []validated, valid []int, items []batchItem, key string) (_ *response, err error) {
	now := s.Now()
	valid, held, err := s.protectItems(ctx, r, vs, valid, items)
	if err != nil {
		return nil, err
	}
	var adm admitted
	defer func() {
		// an OTP item refused after protection, answered by an earlier
		// message, or in a batch that failed does not count against its
		// number
		held.Only(func(i int) bool {
			m := adm.msgs[i]
			return err != nil || m == nil || items[i].Message == nil || items[i].Message.ID != m.ID
		}).GiveBack(ctx, s.Log)
	}()
	if len(valid) == 0 {
		// refused whole: the answer costs one unit of the producer's
		// quota, so repeating it is throttled like any other request,
		// and it is not stored (a replay refuses it again).
		if _, err := s.admitIngress(ctx, w, p, 1); err != nil {
			return nil, err
		}
	}
	if len(valid) > 0 {
		room, err := s.admitOutstanding(ctx, p, len(valid))
		if err != nil {
			return nil, err
		}
		adm = s.admitItems(ctx, r, p, now, vs, valid, items, key, room)
	}
	if len(adm.eligible) > 0 {
		granted, err := s.admitIngress(ctx, w, p, len(adm.eligible))
		if err != nil {
			return nil, err
		}
		for _, i := range adm.eligible[min(granted, len(adm.eligible)):] {
			s.itemError(r, &items[i], &apiError{Kind: KindRateLimited, RetryAfter: time.Second,
				Detail: fmt.Sprintf("the batch exceeded producer %s's ingress burst of %d", p.Name, p.Ingress.Burst)})
		}
		adm.eligible = adm.eligible[:min(granted, len(adm.eligible))]
	}
	if len(adm.eligible) > 0 {
		if err := s.storeItems(ctx, r, now, adm, items); err != nil {
			return nil, err
		}
	}
	out := BatchResponse{Results: items}
	for _, it := range items {
		if it.Message != nil {
			out.Accepted++
		} else {
			out.Rejected++
		}
	}
	return &response{status: http.StatusOK, body: out, noStore: out.Accepted == 0, storeBudget: answerBytesPerAccepted * out.Accepted}, nil
}

// admitted are the batch items that passed the per-item checks: their
// indexes, stamped messages and estimates, in order.
type admitted struct {
	eligible []int
	msgs     map[int]*sms.Message
	etas     map[int]time.Time
}

// admitItems stamps the valid items and refuses, each with its own
// problem, those whose send_at is out of range, those that would expire
// before their turn (items of one class queue behind each other), and
// those beyond room (max_outstanding).
func (s *Server) admitItems(ctx context.Context, r *http.Request, p *Producer, now time.Time,
	vs []validated, valid []int, items []batchItem, key string, room int) admitted {
	adm := admitted{msgs: map[int]*sms.Message{}, etas: map[int]time.Time{}}
	var idx []int
	var ms []*sms.Message
	for _, i := range valid {
		if ferr := checkSendAt(vs[i].msg.SendAt, now, "messages["+strconv.Itoa(i)+"]."); ferr != nil {
			s.itemError(r, &items[i], invalid([]fieldProblem{*ferr}))
			continue
		}
		ik := ""
		if key != "" {
			// A space never appears in a header key, so an item key
			// cannot collide with a single message's key.
			ik = key + " #" + strconv.Itoa(i)
		}
		idx, ms = append(idx, i), append(ms, s.stamp(vs[i], p, ik, now))
	}
	s.ETA.Plan(ctx, now, ms, func(k int, eta time.Time) bool {
		i := idx[k]
		if err := admission.AdmitTTL(ms[k], eta, vs[i].ttl); err != nil {
			s.itemError(r, &items[i], err)
			return false
		}
		if len(adm.eligible) >= room {
			s.itemError(r, &items[i], &apiError{Kind: kindTooManyQueued, RetryAfter: time.Second,
				Detail: fmt.Sprintf("producer %s may have at most %d messages queued or in flight", p.Name, p.MaxOutstanding)})
			return false
		}
		adm.eligible = append(adm.eligible, i)
		adm.msgs[i], adm.etas[i] = ms[k], eta
		return true
	})
	return adm
}

// storeItems enqueues the admitted items in one call and fills in their
// results.
func (s *Server) storeItems(ctx context.Context, r *http.Request, now time.Time, adm admitted, items []batchItem) error {
	ms := make([]*sms.Message, len(adm.eligible))
	for k, i := range adm.eligible {
		ms[k] = adm.msgs[i]
	}
	results, err := s.Queue.EnqueueMany(ctx, ms)
	if err != nil {
		return fmt.Errorf("enqueue batch: %w", err)
	}
	notified := map[sms.Class]bool{}
	for k, i := range adm.eligible {
		res, m := results[k], ms[k]
		switch {
		case res.Err != nil:
			s.itemError(r, &items[i], fmt.Errorf("enqueue batch item %d: %w", i, res.Err))
		case res.Existed:
			rr, err := s.existing(res.Message, m, adm.etas[i], now)
			if err != nil {
				s.itemError(r, &items[i], err)
				continue
			}
			am := rr.body.(AcceptedMessage)
			items[i].Status, items[i].Message = http.StatusAccepted, &am
		default:
			am := acceptedOf(m, adm.etas[i], now)
			items[i].Status, items[i].Message = http.StatusAccepted, &am
			s.ETA.Accepted(now, m)
			s.Metrics.Accepted.WithLabelValues(m.Class.String()).Inc()
			if !notified[m.Class] {
				notified[m.Class] = true
				s.notify(m.Class)
			}
		}
	}
	return nil
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
	m, err := s.Queue.Cancel(r.Context(), id, p.Name)
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
