package admission

// Replies (docs/design.md section 3, "Replies"): a message a recipient
// sends to one of the account's numbers is delivered to the producer that
// last messaged that recipient from that number, as a message.received
// event of the outbox. The send loop reports every sent message (Sent);
// the inbound endpoint forwards every signed message (Forward), keywords
// included. The pair (our sender, recipient) is known to the store only by
// a keyed hash (the account's number key), as suppressions are.

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"smsgw/internal/dispatch"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// The result label of smsgw_replies_total: a closed set.
const (
	ReplyForwarded   = "forwarded"   // written to the outbox for its producer
	ReplyReplayed    = "replayed"    // the vendor sent it again: its event was written before
	ReplyUnclaimed   = "unclaimed"   // no producer messaged the sender from that number within the retention: dropped
	ReplyNoWebhook   = "no_webhook"  // the producer that did has no webhook url: dropped
	ReplyUnavailable = "unavailable" // the store did not answer: 503, the vendor sends it again
)

var replyResults = []string{ReplyForwarded, ReplyReplayed, ReplyUnclaimed, ReplyNoWebhook, ReplyUnavailable}

var _ dispatch.Replies = (*Replies)(nil)

// Replies routes recipients' replies to producers.
type Replies struct {
	routes  queue.Routes
	protect *Protector
	hooks   map[string]bool // producers with a webhook url
	sender  string          // the provider's default sender, normalized
	log     *slog.Logger
	now     func() time.Time

	// Total is smsgw_replies_total{result}; RouteErrors counts the sends
	// whose route could not be recorded.
	Total       *prometheus.CounterVec
	RouteErrors prometheus.Counter
}

// NewReplies builds the routing of replies over routes (the queue
// backend's), for the producers in hooks (those with a webhook url), with
// the provider's default sender (the one a message without from is sent
// from; "" when the provider has none of ours), its metrics on reg.
func NewReplies(routes queue.Routes, protect *Protector, hooks []string, defaultSender string, reg prometheus.Registerer,
	log *slog.Logger, now func() time.Time) (*Replies, error) {
	r := &Replies{routes: routes, protect: protect, hooks: map[string]bool{}, sender: normalSender(defaultSender), log: log, now: now}
	for _, p := range hooks {
		r.hooks[p] = true
	}
	r.Total = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "smsgw_replies_total",
		Help: "Recipients' messages to the account's numbers, by what became of them: forwarded to a producer (message.received), replayed, unclaimed, no_webhook, unavailable.",
	}, []string{"result"})
	r.RouteErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "smsgw_reply_route_errors_total",
		Help: "Sent messages whose (sender, recipient) route for replies could not be recorded: a reply to them goes to an earlier sender, or nobody.",
	})
	for _, c := range []prometheus.Collector{r.Total, r.RouteErrors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, res := range replyResults {
		r.Total.WithLabelValues(res)
	}
	return r, nil
}

// Sent implements dispatch.Replies: m was sent, from its own sender or
// the provider's default; its producer is now the one a reply from its
// recipient to that sender goes to. A failure is counted and logged
// (without the number), never the send's.
func (r *Replies) Sent(ctx context.Context, m *sms.Message) {
	if len(r.hooks) == 0 {
		return // no producer takes replies: nothing to route
	}
	key, err := r.protect.NumberKey(ctx, false)
	if err == nil {
		sender := normalSender(m.From)
		if m.From == "" {
			sender = r.sender
		}
		err = r.routes.RememberRoute(ctx, routeKey(key, sender, m.To), m.Producer)
	}
	if err != nil {
		r.RouteErrors.Inc()
		r.log.WarnContext(ctx, "the route of a sent message's replies was not recorded", "id", m.ID, "err", err)
	}
}

// InboundReply is a signed inbound message as the HTTP edge read it.
type InboundReply struct {
	Adapter    string
	ProviderID string // the vendor's id (stable across its retries)
	From       string // the sender as the vendor gives it
	To         string // our number it was sent to ("" when the vendor does not say)
	Service    string // the vendor's group of our numbers it came through (Twilio's messaging service), if any
	Text       string
	At         time.Time // when the vendor received it; zero: now
}

// Forward writes in as a message.received event for the producer that
// last messaged its sender from the number it was sent to (tried in
// order: that number, the vendor's group of numbers, the sender of
// messages sent without one), or counts it unclaimed. It returns whether
// an event was written; an error only when the store did not answer (the
// caller answers 503 and the vendor sends it again: the same id, one
// event).
func (r *Replies) Forward(ctx context.Context, in InboundReply) (bool, error) {
	res, err := r.forward(ctx, in)
	r.Total.WithLabelValues(res).Inc()
	return res == ReplyForwarded, err
}

func (r *Replies) forward(ctx context.Context, in InboundReply) (string, error) {
	from, err := sms.ParseE164(in.From)
	if err != nil {
		return ReplyUnclaimed, nil // no number we send to: nobody messaged it
	}
	key, err := r.protect.NumberKey(ctx, false)
	if err != nil {
		return ReplyUnavailable, err
	}
	var keys []string
	for _, s := range []string{in.To, in.Service} {
		if s != "" {
			keys = append(keys, routeKey(key, normalSender(s), from))
		}
	}
	keys = append(keys, routeKey(key, "", from))
	producer, _, err := r.routes.Route(ctx, keys)
	switch {
	case err != nil:
		return ReplyUnavailable, err
	case producer == "":
		return ReplyUnclaimed, nil
	case !r.hooks[producer]:
		return ReplyNoWebhook, nil
	}
	at := in.At
	if at.IsZero() {
		at = r.now()
	}
	text := in.Text
	if len(text) > queue.MaxReplyText {
		text = text[:queue.MaxReplyText]
	}
	to := in.To
	if len(to) > queue.MaxReplyNumber {
		to = to[:queue.MaxReplyNumber]
	}
	reply := queue.Reply{ID: ReplyID(key, in.Adapter, in.ProviderID), From: from, To: to, Text: text, At: at.UTC()}
	added, err := r.routes.AddReply(ctx, producer, reply)
	switch {
	case err != nil:
		return ReplyUnavailable, err
	case !added:
		return ReplyReplayed, nil
	}
	return ReplyForwarded, nil
}

// ReplyID is the id of the reply the vendor knows as providerID: "rcv_"
// and the keyed hash of adapter and id, the same on every retry.
func ReplyID(key []byte, adapter, providerID string) string {
	return "rcv_" + NumberID(key, "reply\x00"+adapter+"\x00"+providerID)
}

// routeKey is the route key of the pair (sender, e164): a keyed hash, so
// that the store never holds the number.
func routeKey(key []byte, sender, e164 string) string {
	return NumberID(key, "route\x00"+sender+"\x00"+e164)
}

// normalSender is the form of a sender both a send and an inbound message
// reduce to: a number's digits (vendors write ours with or without '+'),
// any other sender id (a short code, a messaging service) as given.
func normalSender(s string) string {
	s = strings.TrimSpace(s)
	d := strings.TrimPrefix(s, "+")
	if d == "" {
		return s
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return s
		}
	}
	return d
}
