package gateway

import (
	"net/http"
	"testing"

	"smsgw/internal/config"
	"smsgw/internal/httpapi"
)

// TestOptOutWhenListFull, for every adapter in both modes, through real
// HTTP: with the suppression list at protection.max_suppressions (the
// operator's entries fill it), a recipient's signed STOP is still
// recorded (204 or Twilio's 200, the recipient's entry listed, the next
// message to the number ends suppressed, unsent): an opt-out is never refused for
// lack of room, since a vendor that gets 503 retries it for minutes at
// most (Twilio not at all) and the recipient would go on getting
// messages. The operator's own add stays bounded (409).
func TestOptOutWhenListFull(t *testing.T) {
	const other = "+819087654321"
	for _, a := range inboundAdapters {
		for _, m := range modes {
			t.Run(a.name+"/"+string(m), func(t *testing.T) {
				t.Parallel()
				h := start(t, m, func(c *config.Config) {
					a.edit(t, c)
					c.Protection.MaxSuppressions = 1
				})
				wantStatus(t, h.post("/v1/admin/suppressions", keyAdmin, map[string]any{"to": other}), http.StatusCreated)

				a.ok(t, a.post(h, inboundFrom, "STOP", true))
				l := h.suppressionsOf(t)
				if len(l) != 2 {
					t.Fatalf("after STOP on a full list the list is %+v; want the recipient's entry beside the operator's", l)
				}
				wantSuppressedLater(t, h, h.post("/v1/messages", keyNotify, msg("marketing")))
				wantProblem(t, h.post("/v1/admin/suppressions", keyAdmin, map[string]any{"to": "+819011112222"}),
					http.StatusConflict, httpapi.KindSuppressionsFull, "")
			})
		}
	}
}
