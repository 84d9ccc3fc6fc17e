package admission

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/config"
	"smsgw/internal/dispatch"
	"smsgw/internal/metricdef"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// The kind label of smsgw_inbound_total: a closed set.
const (
	InboundOptOut       = "opt_out"       // an opt-out keyword, applied
	InboundOptIn        = "opt_in"        // an opt-in keyword, applied (whether or not it lifted an entry)
	InboundOther        = "other"         // any other text: acknowledged, nothing else
	InboundIgnored      = "ignored"       // a keyword while protection.opt_out.enabled is false
	InboundBadSignature = "bad_signature" // refused 401, nothing changed
	InboundMalformed    = "malformed"     // signed, but a field is missing or not a number: 400
	InboundUnavailable  = "unavailable"   // the suppression list did not take the change: 503, the vendor may retry
)

var inboundKinds = []string{InboundOptOut, InboundOptIn, InboundOther, InboundIgnored, InboundBadSignature,
	InboundMalformed, InboundUnavailable, InboundReplayed, InboundUnconfirmed, InboundOlder}

var _ dispatch.OptOuts = (*OptOuts)(nil)

// OptOuts applies recipients' opt-outs and opt-ins to the suppression
// list, for the inbound endpoint and (optedOut) for a provider's report of
// an opt-out.
type OptOuts struct {
	Cfg     config.OptOutConfig
	stop    map[string]bool // the keywords, upper case
	start   map[string]bool
	protect *Protector
	log     *slog.Logger
	now     func() time.Time
	Inbound *prometheus.CounterVec // smsgw_inbound_total{adapter,kind}
}

// NewOptOuts builds the opt-out policy over protect's suppression list, with
// the inbound counter registered on reg for every adapter.
func NewOptOuts(cfg config.OptOutConfig, protect *Protector, reg prometheus.Registerer, log *slog.Logger,
	now func() time.Time, adapters []string) (*OptOuts, error) {
	o := &OptOuts{Cfg: cfg, stop: map[string]bool{}, start: map[string]bool{}, protect: protect, log: log, now: now}
	for _, w := range cfg.StopWords {
		o.stop[strings.ToUpper(w)] = true
	}
	for _, w := range cfg.StartWords {
		o.start[strings.ToUpper(w)] = true
	}
	o.Inbound = metricdef.CounterVec("smsgw_inbound_total",
		"Messages recipients sent to the account's number (POST /v1/inbound), by adapter and what they were.", "adapter", "kind")
	if err := metricdef.Register(reg, o.Inbound); err != nil {
		return nil, err
	}
	for _, a := range adapters {
		for _, k := range inboundKinds {
			o.Inbound.WithLabelValues(a, k)
		}
	}
	return o, nil
}

// KindOf is what a message asks for: the vendor's own reading of it when
// it gives one (vendor, InboundOptOut or InboundOptIn: the vendor acts on
// it, so the list must follow), else the whole text, trimmed, in any
// case, against the keywords.
func (o *OptOuts) KindOf(text, vendor string) string {
	w := strings.ToUpper(strings.TrimSpace(text))
	switch {
	case vendor == InboundOptOut || vendor == InboundOptIn:
		return vendor
	case o.stop[w]:
		return InboundOptOut
	case o.start[w]:
		return InboundOptIn
	}
	return InboundOther
}

// Suppress puts e164 on the list as src's entry. An entry already there
// keeps its source (an operator's stays an operator's). It returns the
// entry's id and whether it is new.
func (o *OptOuts) Suppress(ctx context.Context, e164 string, src state.SuppressionSource, reason string) (string, bool, error) {
	key, err := o.protect.NumberKey(ctx, false)
	if err != nil {
		return "", false, err
	}
	if len(reason) > state.MaxSuppressionReason {
		reason = reason[:state.MaxSuppressionReason]
	}
	e := state.Suppression{ID: NumberID(key, e164), Masked: sms.MaskPhone(e164), Reason: reason,
		CreatedAt: o.now().UTC().Truncate(time.Second), Source: src}
	added, err := o.protect.Sup.Add(ctx, e)
	return e.ID, added, err
}

// Lift takes e164 off the list if the recipient's opt-out or the
// provider's report of one put it there, not after at, when the opt-in
// was received (state.Suppressions.LiftOlder).
func (o *OptOuts) Lift(ctx context.Context, e164 string, at time.Time) (string, state.LiftResult, error) {
	key, err := o.protect.NumberKey(ctx, false)
	if err != nil {
		return "", state.LiftAbsent, err
	}
	id := NumberID(key, e164)
	res, err := o.protect.Sup.LiftOlder(ctx, id, at, state.SourceRecipient, state.SourceProvider)
	return id, res, err
}

// ProviderOptOut implements dispatch.OptOuts: the provider refused a send
// because its recipient opted out there (Twilio 21610), so to goes on the
// list as the provider's entry and later transactional and marketing
// messages to it are refused at accept instead of spending a slot of the
// contract on a refusal. With protection.opt_out.enabled false nothing
// changes.
func (o *OptOuts) ProviderOptOut(ctx context.Context, to, why string) error {
	return o.OptOutFor(ctx, to, "the provider refused a send: the recipient opted out ("+why+")")
}

// OptOutFor puts to on the list as the provider's entry, with reason.
func (o *OptOuts) OptOutFor(ctx context.Context, to, reason string) error {
	if !o.Cfg.Enabled {
		return nil
	}
	e164, err := sms.ParseE164(to)
	if err != nil {
		return err
	}
	id, added, err := o.Suppress(ctx, e164, state.SourceProvider, reason)
	if err != nil {
		return err
	}
	if added {
		o.log.InfoContext(ctx, "number suppressed: the provider says its recipient opted out", "suppression_id", id,
			"to", sms.MaskPhone(e164))
	}
	return nil
}

// Enabled tells whether keywords change the list
// (protection.opt_out.enabled).
func (o *OptOuts) Enabled() bool { return o.Cfg.Enabled }

// CountInbound counts one inbound message through adapter by what came of
// it (smsgw_inbound_total{adapter,kind}; kind is one of the Inbound*
// words, adapter one the counter was registered for).
func (o *OptOuts) CountInbound(adapter, kind string) {
	o.Inbound.WithLabelValues(adapter, kind).Inc()
}
