package httpapi

// What recipients ask for reaches the suppression list here (docs/design.md
// section 3, "Protection"). A recipient who texts an opt-out keyword to the
// account's number (the provider posts it to POST /v1/inbound/{adapter})
// is put on the list as the recipient's entry; an opt-in keyword takes
// that entry off again, or one the provider's report of an opt-out made,
// never an operator's. Every signed message is first forwarded as a reply
// (inboundreply), else counted and dropped; nothing of it is logged. The
// number is never logged, counted or answered in clear: the list keeps
// its keyed hash and its masked form, the log the masked form.

import (
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"smsgw/internal/admission"
	"smsgw/internal/httpapi/inboundreply"
	"smsgw/internal/provider"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// MaxInboundBytes bounds an inbound message request's body, as receipts
// are bounded: a vendor's inbound webhook is a few hundred bytes to a few
// KiB (one part of a long message at most).
const MaxInboundBytes = MaxReceiptBytes

// postInbound is POST /v1/inbound/{adapter}: a message a recipient sent to
// the account's number, posted by the provider. No bearer key: the adapter
// checks its vendor's signature, as for receipts; a bad or missing one is
// 401 and changes nothing. A keyword changes the suppression list; every
// signed message is acknowledged (204, or the adapter's own answer: an
// empty TwiML document for Twilio) so that no vendor retries it.
func (s *Server) postInbound(w http.ResponseWriter, r *http.Request) {
	adapter := chi.URLParam(r, "adapter")
	if adapter != s.Cfg.Provider.Kind || s.Hooks.Inbound == nil || s.Hooks.OptOuts == nil {
		s.WriteError(w, r, errorf(KindNotFound, "this gateway takes no inbound messages for adapter "+maskID(adapter)))
		return
	}
	o := s.Hooks.OptOuts
	count := func(kind string) { o.CountInbound(adapter, kind) }
	raw, err := s.readWebhook(w, r, MaxInboundBytes)
	if err != nil {
		s.WriteError(w, r, err)
		return
	}
	in, err := s.Hooks.Inbound.ParseInbound(r, raw)
	if err != nil {
		var re *provider.ReceiptError
		switch {
		case errors.Is(err, provider.ErrBadSignature): // stale ones too
			count(admission.InboundBadSignature)
		case errors.As(err, &re):
			count(admission.InboundMalformed)
		}
		s.webhookRefused(w, r, "message", err)
		return
	}
	var wake func() // the reply first, durable before any 2xx: a keyword failing after it is sent again, forwarded once
	if s.Hooks.Callbacks != nil {
		wake = s.Hooks.Callbacks.Wake
	}
	if err := inboundreply.Forward(r.Context(), s.Hooks.Replies, wake, adapter, in); err != nil {
		count(admission.InboundUnavailable)
		s.WriteError(w, r, &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err, Detail: "the reply was not stored: send it again"})
		return
	}
	kind := o.KindOf(in.Text, vendorKeywords[in.Keyword])
	switch {
	case kind == admission.InboundOther:
	case !o.Enabled():
		kind = admission.InboundIgnored
	default:
		if e := s.applyKeyword(r, adapter, kind, in); e != nil {
			kind = e.kind
			if e.err != nil {
				count(kind)
				s.webhookRefused(w, r, "message", e.err)
				return
			}
		}
	}
	count(kind)
	if a, ok := s.Hooks.Inbound.(provider.InboundAcker); ok {
		ct, body := a.InboundAck()
		writeRaw(w, ct, http.StatusOK, body)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// vendorKeywords are the kinds of the vendors' own readings of a message
// (provider.Inbound.Keyword).
var vendorKeywords = map[string]string{provider.KeywordOptOut: admission.InboundOptOut, provider.KeywordOptIn: admission.InboundOptIn}

// keywordFailure is why a keyword was not applied: the kind counted and
// the error answered (nil: acknowledged like an applied one).
type keywordFailure struct {
	kind string
	err  error
}

// applyKeyword applies an opt-out or opt-in keyword from in's sender.
func (s *Server) applyKeyword(r *http.Request, adapter, kind string, in provider.Inbound) *keywordFailure {
	o, ctx := s.Hooks.OptOuts, r.Context()
	from, err := sms.ParseE164(in.From)
	if err != nil {
		return &keywordFailure{admission.InboundMalformed, fieldError(in.FromField, "must be the sender's number in E.164")}
	}
	masked := sms.MaskPhone(from)
	adm, f := s.admitKeyword(ctx, adapter, in)
	if f != nil {
		return f
	}
	if f := s.applyAdmitted(r, adapter, kind, from, masked, adm); f != nil {
		return f
	}
	if err := o.RememberApplied(ctx, adm.key); err != nil {
		return unavailableKeyword(err, "the suppression list did not record the message as applied; send it again")
	}
	return nil
}

// applyAdmitted changes the list for an admitted keyword from from.
func (s *Server) applyAdmitted(r *http.Request, adapter, kind, from, masked string, adm admittedKeyword) *keywordFailure {
	o, ctx := s.Hooks.OptOuts, r.Context()
	if kind == admission.InboundOptOut {
		id, added, err := o.Suppress(ctx, from, state.SourceRecipient, "opted out by text message ("+adapter+")")
		switch {
		case errors.Is(err, state.ErrSuppressionsFull):
			// Opt-outs go past protection.max_suppressions (state.Suppressions.Add):
			// this is the store's own bound.
			s.Log.ErrorContext(ctx, "a recipient's opt-out was not recorded: the suppression list holds the most entries it can; remove entries",
				"adapter", adapter, "to", masked, "bound", state.MaxSuppressions)
			return &keywordFailure{admission.InboundUnavailable, &apiError{Kind: kindUnavailable, RetryAfter: time.Minute, Err: err,
				Detail: "the suppression list is full: the opt-out was not recorded; send it again"}}
		case err != nil:
			return &keywordFailure{admission.InboundUnavailable, &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err,
				Detail: "the suppression list is unavailable: the opt-out was not recorded; send it again"}}
		}
		if added {
			s.Log.InfoContext(ctx, "number suppressed by its recipient (opt-out keyword)", "suppression_id", id, "to", masked, "adapter", adapter)
		}
		return nil
	}
	id, res, err := o.Lift(ctx, from, adm.at)
	switch {
	case err != nil:
		return &keywordFailure{admission.InboundUnavailable, &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err,
			Detail: "the suppression list is unavailable: the opt-in was not recorded; send it again"}}
	case res == state.LiftRemoved:
		s.Log.InfoContext(ctx, "number unsuppressed by its recipient (opt-in keyword)", "suppression_id", id, "to", masked, "adapter", adapter)
	case res == state.LiftKept:
		s.Log.InfoContext(ctx, "opt-in keyword left the number suppressed: an operator put it on the list", "suppression_id", id,
			"to", masked, "adapter", adapter)
	case res == state.LiftNewer:
		s.Log.InfoContext(ctx, "opt-in keyword left the number suppressed: the entry is newer than the message", "suppression_id", id,
			"to", masked, "adapter", adapter)
		return &keywordFailure{kind: admission.InboundOlder}
	}
	return nil
}
