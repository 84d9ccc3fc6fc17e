// Package inboundreply hands every signed inbound message the HTTP edge
// takes (POST /v1/inbound/{adapter}) to the routing of replies
// (admission.Replies, docs/design.md section 3, "Replies"), before the
// edge answers the vendor: the reply is durable before any 2xx.
package inboundreply

import (
	"context"

	"smsgw/internal/admission"
	"smsgw/internal/provider"
)

// Replies routes an inbound message to the producer that last messaged
// its sender (admission.Replies): added is false for one already routed.
type Replies interface {
	Forward(ctx context.Context, in admission.InboundReply) (added bool, err error)
}

// Forward writes in, received through adapter, as a message.received
// event for its producer (Replies.Forward; nothing with r nil)
// and calls wake, when set, once an event was written. An error means the
// store did not answer: the caller answers 503 and the vendor sends the
// message again.
func Forward(ctx context.Context, r Replies, wake func(), adapter string, in provider.Inbound) error {
	if r == nil {
		return nil
	}
	added, err := r.Forward(ctx, admission.InboundReply{Adapter: adapter, ProviderID: in.ProviderID,
		From: in.From, To: in.To, Service: in.Service, Text: in.Text, At: in.At})
	if added && wake != nil {
		wake()
	}
	return err
}
