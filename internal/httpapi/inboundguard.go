package httpapi

// A recipient's keyword is applied once and only as the vendor sent it
// (docs/design.md section 3, "Protection"). The adapter has checked the
// signature and the form (provider.CheckFormNames, the account, the id's
// format, a signed time within the window); here the gateway adds what
// needs the store or the vendor's API:
//
//   - the list remembers every inbound message it applied
//     (state.AppliedMemory, by a keyed hash of adapter and vendor id): a
//     message applied before is acknowledged and changes nothing, so a
//     captured START replayed after a later STOP does not lift it, and a
//     vendor's retry is harmless;
//   - an opt-in lifts an entry only when the message is not older than
//     the entry (state.Suppressions.LiftOlder), which still holds once the
//     memory of a message has ended;
//   - where the vendor signs no time (Twilio), its API confirms the
//     message's sender and text before anything changes
//     (provider.InboundConfirmer): a signature captured once can neither
//     be replayed under a new id nor re-cut into another sender's keyword.
//     When the API cannot be asked, nothing is applied and the answer is
//     503 with Retry-After (docs/operations.md says how to make Twilio
//     retry it; a STOP Twilio itself applies reaches the list anyway at
//     the next send, as Twilio's 21610).

import (
	"context"
	"errors"
	"net/http"
	"time"

	"smsgw/internal/admission"
	"smsgw/internal/provider"
)

// admittedKeyword is a keyword message the guard let through: its key in
// the memory of applied messages and when the vendor received it.
type admittedKeyword struct {
	key string
	at  time.Time
}

// admitKeyword decides whether a keyword message in may change the list:
// nil failure with the message's key and time, or why not. A replay is a
// failure without an error: acknowledged like any signed message.
func (s *Server) admitKeyword(ctx context.Context, adapter string, in provider.Inbound) (admittedKeyword, *keywordFailure) {
	o := s.Hooks.OptOuts
	key, err := o.AppliedKey(ctx, adapter, in.ProviderID)
	if err != nil {
		return admittedKeyword{}, unavailableKeyword(err, "the suppression list is unavailable: nothing was recorded; send it again")
	}
	a := admittedKeyword{key: key, at: in.At}
	seen, err := o.Applied(ctx, a.key)
	switch {
	case err != nil:
		return admittedKeyword{}, unavailableKeyword(err, "the suppression list is unavailable: nothing was recorded; send it again")
	case seen:
		return admittedKeyword{}, &keywordFailure{kind: admission.InboundReplayed}
	}
	if c, ok := s.Hooks.Inbound.(provider.InboundConfirmer); ok {
		at, err := c.ConfirmInbound(ctx, in)
		switch {
		case errors.Is(err, provider.ErrConfirmUnavailable):
			s.Log.WarnContext(ctx, "an inbound keyword was not applied: the provider's API could not confirm it; the provider may send it again",
				"adapter", adapter, "provider_message_id", maskID(in.ProviderID), "err", err)
			return admittedKeyword{}, unavailableKeyword(err, "the provider's API could not confirm the message: nothing was recorded; send it again")
		case err != nil:
			return admittedKeyword{}, &keywordFailure{kind: admission.InboundUnconfirmed, err: err}
		}
		a.at = at
	}
	if a.at.IsZero() {
		a.at = s.Now()
	}
	return a, nil
}

// unavailableKeyword is a keyword not applied because a dependency did not
// answer: 503 with Retry-After, the vendor may send it again.
func unavailableKeyword(err error, detail string) *keywordFailure {
	return &keywordFailure{admission.InboundUnavailable, &apiError{Kind: kindUnavailable, RetryAfter: time.Second, Err: err, Detail: detail}}
}

// webhookRefused answers a vendor's webhook its adapter (or the vendor's
// API) refused (webhookError). A signature missing, wrong, stale or not
// confirmed is a failed authentication of the client address
// (failedAuth): throttled and sample-logged as failed bearer keys are, so
// that the signature check is no oracle to guess a secret against.
func (s *Server) webhookRefused(w http.ResponseWriter, r *http.Request, what string, err error) {
	if errors.Is(err, provider.ErrBadSignature) {
		s.failedAuth(w, r, "provider webhook refused: signature missing, wrong, stale or not confirmed", "a valid signature",
			webhookError(what, err))
		return
	}
	s.WriteError(w, r, webhookError(what, err))
}
