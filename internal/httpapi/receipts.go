package httpapi

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"smsgw/internal/provider"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// MaxReceiptBytes bounds a receipt request's body: vendors' receipts are
// a few hundred bytes.
const MaxReceiptBytes = 16 << 10

// unknownLogEvery is how often the unmatched receipts (and the OTP
// records that failed) are logged: one line per interval with how many
// there were, never a line per receipt.
const unknownLogEvery = 10 * time.Second

// readWebhook reads the body of a provider's webhook (a receipt, an
// inbound message), at most limit bytes. These endpoints take no bearer
// key, so anyone may post to them: a body over the bound (413) or cut
// short by its client (400) is answered without a log line of its own, and
// one line per unknownLogEvery says how many there were, as failed bearer
// keys are sampled (authFailed).
func (s *Server) readWebhook(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err == nil {
		return raw, nil
	}
	if n, ok := s.webhookBodyLog.Add(s.Now(), unknownLogEvery); ok {
		s.Log.WarnContext(r.Context(), "provider webhook bodies refused: over the bound or cut short by the client",
			"path", logPath(r), "count", n, "client_ip", clientIP(r.Context()), "err", err)
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, errorf(kindTooLarge, "the request body is larger than "+strconv.FormatInt(mbe.Limit, 10)+" bytes")
	}
	return nil, &apiError{Kind: KindInvalid, Detail: "could not read the request body",
		Fields: []fieldProblem{{"request", "unreadable body"}}}
}

// maskID shows the first and last two characters of a vendor's id, enough
// to find it in the vendor's console, not to use it.
func maskID(id string) string {
	if len(id) <= 6 {
		return "***"
	}
	return id[:2] + "***" + id[len(id)-2:]
}

// webhookError is the answer to a vendor's webhook (what: "receipt",
// "message") its adapter refused: 401 for a signature missing, wrong or
// signed too long ago, 400 naming the field of a signed but malformed one,
// else err itself.
func webhookError(what string, err error) error {
	var re *provider.ReceiptError
	switch {
	case errors.Is(err, provider.ErrInboundNotConfirmed):
		return errorf(KindBadSignature, "the provider's API does not confirm the "+what+" as signed; nothing was changed")
	case errors.Is(err, provider.ErrStaleReceipt):
		return errorf(KindBadSignature, "the "+what+"'s signed time is more than "+provider.ReceiptMaxAge.String()+
			" old, or ahead of the gateway's clock: refused as a possible replay; nothing was changed")
	case errors.Is(err, provider.ErrBadSignature):
		return errorf(KindBadSignature, "the "+what+"'s signature is missing or wrong; nothing was changed")
	case errors.As(err, &re):
		return fieldError(re.Field, re.Reason)
	}
	return err
}

// postReceipt is POST /v1/receipts/{adapter}: a provider's delivery
// receipt. No bearer key: the adapter checks its vendor's signature; a bad
// or missing one is 401 and changes nothing. Every signed receipt is
// answered 204, matched or not, so a vendor never retries one in a storm.
func (s *Server) postReceipt(w http.ResponseWriter, r *http.Request) {
	adapter := chi.URLParam(r, "adapter")
	if adapter != s.Cfg.Provider.Kind || s.Hooks.Receipts == nil {
		s.WriteError(w, r, errorf(KindNotFound, "this gateway takes no receipts for adapter "+maskID(adapter)))
		return
	}
	raw, err := s.readWebhook(w, r, MaxReceiptBytes)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	rc, err := s.Hooks.Receipts.ParseReceipt(r, raw)
	var re *provider.ReceiptError
	if err == nil || errors.As(err, &re) {
		s.Metrics.Receipts.Signed(adapter, rc.PreviousSecret)
	}
	if err != nil {
		s.webhookRefused(w, r, "receipt", err)
		return
	}
	rm := s.Metrics.Receipts
	if rc.Status == "" {
		rm.Receipts.WithLabelValues(adapter, "other").Inc()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	q := queue.Receipt{ProviderID: rc.ProviderID, Reference: rc.Reference, Status: rc.Status, ErrorCode: rc.ErrorCode}
	if !sms.ValidID(q.Reference) {
		q.Reference = "" // not one of ours: match by the provider id
	}
	if err := queue.CheckReceipt(q); err != nil {
		s.WriteError(w, r, fieldError("provider_message_id", err.Error()))
		return
	}
	out, err := s.Store.Queue.ApplyReceipt(r.Context(), q)
	if err != nil {
		s.WriteError(w, r, &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err,
			Detail: "the store did not take the receipt; send it again"})
		return
	}
	rm.Receipts.WithLabelValues(adapter, string(rc.Status)).Inc()
	switch out.Result {
	case queue.ReceiptUnknown:
		rm.Unknown.WithLabelValues(adapter).Inc()
		if n, ok := s.unknownLog.Add(s.Now(), unknownLogEvery); ok {
			s.Log.Warn("receipts matched no message", "adapter", adapter, "count", n,
				"provider_message_id", maskID(rc.ProviderID), "status", string(rc.Status))
		}
	case queue.ReceiptApplied:
		rm.Outcome(out.Message.Class, out.Message.Status)
		if m := out.Message; m.Status == sms.StatusDelivered && !m.SentAt.IsZero() && !m.UpdatedAt.Before(m.SentAt) {
			rm.Latency.WithLabelValues(m.Class.String()).Observe(m.UpdatedAt.Sub(m.SentAt).Seconds())
		}
	case queue.ReceiptParked:
		rm.Early.WithLabelValues(adapter).Inc()
		if out.Message != nil { // else an OTP not stored yet: counted when it is (recordOTP)
			rm.Outcome(out.Message.Class, rc.Status)
		}
	}
	if rc.Said != nil && s.Hooks.Said != nil {
		s.Hooks.Said(r.Context(), rc.Said, rc.Sender)
	}
	if rc.OptedOut {
		if e := s.receiptOptedOut(r, adapter, rc); e != nil {
			s.WriteError(w, r, e)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// receiptOptedOut puts the recipient of a receipt that says they opted out
// (Vonage's err-code 9) on the suppression list as the provider's entry.
// The store's failure is a 503, so that the vendor sends the receipt again
// (applying it twice changes nothing); a recipient that is not a number is
// logged, not refused: the receipt itself was taken.
func (s *Server) receiptOptedOut(r *http.Request, adapter string, rc provider.Receipt) error {
	err := s.Hooks.OptOuts.OptOutFor(r.Context(), rc.Recipient,
		"the provider reported that the recipient opted out ("+adapter+" receipt, error "+rc.ErrorCode+")")
	var ve *sms.ValidationError
	switch {
	case errors.As(err, &ve):
		s.Log.WarnContext(r.Context(), "a receipt reports an opt-out for a recipient that is not an E.164 number; not suppressed",
			"adapter", adapter, "provider_message_id", maskID(rc.ProviderID))
	case err != nil:
		return &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err,
			Detail: "the suppression list did not take the receipt's opt-out; send it again"}
	}
	return nil
}
