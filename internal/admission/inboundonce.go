package admission

import "context"

// The kinds of smsgw_inbound_total a keyword applied at most once adds
// (the HTTP edge's inbound guard decides them).
const (
	InboundReplayed    = "replayed"    // a keyword from a message applied before: acknowledged, nothing changed
	InboundUnconfirmed = "unconfirmed" // the vendor's API does not confirm the message: refused 401, nothing changed
	InboundOlder       = "older"       // an opt-in older than the entry it would lift: acknowledged, nothing changed
)

// AppliedKey is the key an inbound message of adapter with the vendor's
// id providerID is remembered by once applied: the keyed hash (the
// account's number key) of both, never the id itself.
func (o *OptOuts) AppliedKey(ctx context.Context, adapter, providerID string) (string, error) {
	k, err := o.protect.NumberKey(ctx, false)
	if err != nil {
		return "", err
	}
	return NumberID(k, "inbound\x00"+adapter+"\x00"+providerID), nil
}

// Applied reports whether the message known by key was applied within
// state.AppliedMemory.
func (o *OptOuts) Applied(ctx context.Context, key string) (bool, error) {
	return o.protect.Sup.Applied(ctx, key)
}

// RememberApplied records that the message known by key was applied.
func (o *OptOuts) RememberApplied(ctx context.Context, key string) error {
	return o.protect.Sup.RememberApplied(ctx, key)
}
