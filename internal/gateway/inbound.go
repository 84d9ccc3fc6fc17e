package gateway

// What recipients ask for reaches the suppression list here (docs/design.md
// section 3, "Protection"). A recipient who texts an opt-out keyword to the
// account's number (the provider posts it to POST /v1/inbound/{adapter})
// is put on the list as the recipient's entry; an opt-in keyword takes
// that entry off again, or one the provider's report of an opt-out made,
// never an operator's. Any other text is acknowledged and counted: it is
// not stored, not forwarded and not logged. The number is never stored,
// logged, counted or answered in clear: the list keeps its keyed hash and
// its masked form, the log the masked form.

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/config"
	"smsgw/internal/dispatch"
	"smsgw/internal/provider"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// maxInboundBytes bounds an inbound message request's body, as receipts
// are bounded: a vendor's inbound webhook is a few hundred bytes to a few
// KiB (one part of a long message at most).
const maxInboundBytes = maxReceiptBytes

// The kind label of smsgw_inbound_total: a closed set.
const (
	inboundOptOut       = "opt_out"       // an opt-out keyword, applied
	inboundOptIn        = "opt_in"        // an opt-in keyword, applied (whether or not it lifted an entry)
	inboundOther        = "other"         // any other text: acknowledged, nothing else
	inboundIgnored      = "ignored"       // a keyword while protection.opt_out.enabled is false
	inboundBadSignature = "bad_signature" // refused 401, nothing changed
	inboundMalformed    = "malformed"     // signed, but a field is missing or not a number: 400
	inboundUnavailable  = "unavailable"   // the suppression list did not take the change: 503, the vendor may retry
)

var inboundKinds = []string{inboundOptOut, inboundOptIn, inboundOther, inboundIgnored, inboundBadSignature,
	inboundMalformed, inboundUnavailable, inboundReplayed, inboundUnconfirmed, inboundOlder}

// optOuts applies recipients' opt-outs and opt-ins to the suppression
// list, for the inbound endpoint and (optedOut) for a provider's report of
// an opt-out.
type optOuts struct {
	cfg     config.OptOutConfig
	stop    map[string]bool // the keywords, upper case
	start   map[string]bool
	protect *protector
	log     *slog.Logger
	now     func() time.Time
	inbound *prometheus.CounterVec // smsgw_inbound_total{adapter,kind}
}

func newOptOuts(cfg config.OptOutConfig, protect *protector, reg prometheus.Registerer, log *slog.Logger,
	now func() time.Time) (*optOuts, error) {
	o := &optOuts{cfg: cfg, stop: map[string]bool{}, start: map[string]bool{}, protect: protect, log: log, now: now}
	for _, w := range cfg.StopWords {
		o.stop[strings.ToUpper(w)] = true
	}
	for _, w := range cfg.StartWords {
		o.start[strings.ToUpper(w)] = true
	}
	o.inbound = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "smsgw_inbound_total",
		Help: "Messages recipients sent to the account's number (POST /v1/inbound), by adapter and what they were.",
	}, []string{"adapter", "kind"})
	if err := reg.Register(o.inbound); err != nil {
		return nil, err
	}
	for _, a := range receiptAdapters {
		for _, k := range inboundKinds {
			o.inbound.WithLabelValues(a, k)
		}
	}
	return o, nil
}

// kindOf is what a message's text asks for: the whole text, trimmed, in
// any case, against the keywords.
func (o *optOuts) kindOf(text string) string {
	w := strings.ToUpper(strings.TrimSpace(text))
	switch {
	case o.stop[w]:
		return inboundOptOut
	case o.start[w]:
		return inboundOptIn
	}
	return inboundOther
}

// suppress puts e164 on the list as src's entry. An entry already there
// keeps its source (an operator's stays an operator's). It returns the
// entry's id and whether it is new.
func (o *optOuts) suppress(ctx context.Context, e164 string, src state.SuppressionSource, reason string) (string, bool, error) {
	key, err := o.protect.numberKey(ctx, false)
	if err != nil {
		return "", false, err
	}
	if len(reason) > state.MaxSuppressionReason {
		reason = reason[:state.MaxSuppressionReason]
	}
	e := state.Suppression{ID: numberID(key, e164), Masked: sms.MaskPhone(e164), Reason: reason,
		CreatedAt: o.now().UTC().Truncate(time.Second), Source: src}
	added, err := o.protect.sup.Add(ctx, e)
	return e.ID, added, err
}

// lift takes e164 off the list if the recipient's opt-out or the
// provider's report of one put it there before at, when the opt-in was
// received.
func (o *optOuts) lift(ctx context.Context, e164 string, at time.Time) (string, state.LiftResult, error) {
	key, err := o.protect.numberKey(ctx, false)
	if err != nil {
		return "", state.LiftAbsent, err
	}
	id := numberID(key, e164)
	res, err := o.protect.sup.LiftOlder(ctx, id, at, state.SourceRecipient, state.SourceProvider)
	return id, res, err
}

var _ dispatch.OptOuts = (*optOuts)(nil)

// ProviderOptOut implements dispatch.OptOuts: the provider refused a send
// because its recipient opted out there (Twilio 21610), so to goes on the
// list as the provider's entry and later transactional and marketing
// messages to it are refused at accept instead of spending a slot of the
// contract on a refusal. With protection.opt_out.enabled false nothing
// changes.
func (o *optOuts) ProviderOptOut(ctx context.Context, to, why string) error {
	return o.providerOptOut(ctx, to, "the provider refused a send: the recipient opted out ("+why+")")
}

// providerOptOut puts to on the list as the provider's entry, with reason.
func (o *optOuts) providerOptOut(ctx context.Context, to, reason string) error {
	if !o.cfg.Enabled {
		return nil
	}
	e164, err := sms.ParseE164(to)
	if err != nil {
		return err
	}
	id, added, err := o.suppress(ctx, e164, state.SourceProvider, reason)
	if err != nil {
		return err
	}
	if added {
		o.log.InfoContext(ctx, "number suppressed: the provider says its recipient opted out", "suppression_id", id,
			"to", sms.MaskPhone(e164))
	}
	return nil
}

// postInbound is POST /v1/inbound/{adapter}: a message a recipient sent to
// the account's number, posted by the provider. No bearer key: the adapter
// checks its vendor's signature, as for receipts; a bad or missing one is
// 401 and changes nothing. A keyword changes the suppression list; every
// signed message is acknowledged (204, or the adapter's own answer: an
// empty TwiML document for Twilio) so that no vendor retries it.
func (s *server) postInbound(w http.ResponseWriter, r *http.Request) {
	adapter := chi.URLParam(r, "adapter")
	if adapter != s.cfg.Provider.Kind || s.inbound == nil || s.optOuts == nil {
		s.writeError(w, r, errorf(kindNotFound, "this gateway takes no inbound messages for adapter "+maskID(adapter)))
		return
	}
	o := s.optOuts
	count := func(kind string) { o.inbound.WithLabelValues(adapter, kind).Inc() }
	raw, err := s.readWebhook(w, r, maxInboundBytes)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	in, err := s.inbound.ParseInbound(r, raw)
	if err != nil {
		var re *provider.ReceiptError
		switch {
		case errors.Is(err, provider.ErrBadSignature): // stale ones too
			count(inboundBadSignature)
		case errors.As(err, &re):
			count(inboundMalformed)
		}
		s.webhookRefused(w, r, "message", err)
		return
	}
	kind := o.kindOf(in.Text)
	switch {
	case kind == inboundOther:
	case !o.cfg.Enabled:
		kind = inboundIgnored
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
	if a, ok := s.inbound.(provider.InboundAcker); ok {
		ct, body := a.InboundAck()
		writeRaw(w, ct, http.StatusOK, body)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// keywordFailure is why a keyword was not applied: the kind counted and
// the error answered (nil: acknowledged like an applied one).
type keywordFailure struct {
	kind string
	err  error
}

// applyKeyword applies an opt-out or opt-in keyword from in's sender.
func (s *server) applyKeyword(r *http.Request, adapter, kind string, in provider.Inbound) *keywordFailure {
	o, ctx := s.optOuts, r.Context()
	from, err := sms.ParseE164(in.From)
	if err != nil {
		return &keywordFailure{inboundMalformed, fieldError(in.FromField, "must be the sender's number in E.164")}
	}
	masked := sms.MaskPhone(from)
	adm, f := s.admitKeyword(ctx, adapter, in)
	if f != nil {
		return f
	}
	if f := s.applyAdmitted(r, adapter, kind, from, masked, adm); f != nil {
		return f
	}
	if err := o.protect.sup.RememberApplied(ctx, adm.key); err != nil {
		return unavailableKeyword(err, "the suppression list did not record the message as applied; send it again")
	}
	return nil
}

// applyAdmitted changes the list for an admitted keyword from from.
func (s *server) applyAdmitted(r *http.Request, adapter, kind, from, masked string, adm admittedKeyword) *keywordFailure {
	o, ctx := s.optOuts, r.Context()
	if kind == inboundOptOut {
		id, added, err := o.suppress(ctx, from, state.SourceRecipient, "opted out by text message ("+adapter+")")
		switch {
		case errors.Is(err, state.ErrSuppressionsFull):
			// Opt-outs go past protection.max_suppressions (state.Suppressions.Add):
			// this is the store's own bound.
			s.log.ErrorContext(ctx, "a recipient's opt-out was not recorded: the suppression list holds the most entries it can; remove entries",
				"adapter", adapter, "to", masked, "bound", state.MaxSuppressions)
			return &keywordFailure{inboundUnavailable, &apiError{Kind: kindUnavailable, RetryAfter: time.Minute, Err: err,
				Detail: "the suppression list is full: the opt-out was not recorded; send it again"}}
		case err != nil:
			return &keywordFailure{inboundUnavailable, &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err,
				Detail: "the suppression list is unavailable: the opt-out was not recorded; send it again"}}
		}
		if added {
			s.log.InfoContext(ctx, "number suppressed by its recipient (opt-out keyword)", "suppression_id", id, "to", masked, "adapter", adapter)
		}
		return nil
	}
	id, res, err := o.lift(ctx, from, adm.at)
	switch {
	case err != nil:
		return &keywordFailure{inboundUnavailable, &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err,
			Detail: "the suppression list is unavailable: the opt-in was not recorded; send it again"}}
	case res == state.LiftRemoved:
		s.log.InfoContext(ctx, "number unsuppressed by its recipient (opt-in keyword)", "suppression_id", id, "to", masked, "adapter", adapter)
	case res == state.LiftKept:
		s.log.InfoContext(ctx, "opt-in keyword left the number suppressed: an operator put it on the list", "suppression_id", id,
			"to", masked, "adapter", adapter)
	case res == state.LiftNewer:
		s.log.InfoContext(ctx, "opt-in keyword left the number suppressed: the entry is newer than the message", "suppression_id", id,
			"to", masked, "adapter", adapter)
		return &keywordFailure{kind: inboundOlder}
	}
	return nil
}
