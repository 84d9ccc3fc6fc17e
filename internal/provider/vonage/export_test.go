package vonage

import "time"

// TimeoutOf is the per-send timeout p applies.
func TimeoutOf(p *Provider) time.Duration { return p.cfg.Timeout }
