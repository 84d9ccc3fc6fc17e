package vonage

import (
	"net/http"
	"time"
)

// TimeoutOf is the per-send timeout p applies.
func TimeoutOf(p *Provider) time.Duration { return p.cfg.Timeout }

// CheckInboundJSON runs the inbound message checks on raw, as if signed.
func CheckInboundJSON(p *Provider, r *http.Request, raw string) error {
	ps, _ := params(r, []byte(raw))
	return p.checkInbound(r, []byte(raw), ps)
}
