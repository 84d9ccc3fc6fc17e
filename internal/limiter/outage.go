package limiter

import (
	"sync/atomic"
	"time"
)

// Outage is what one process knows of its Redis across the limiters and
// stores that share it: when a call last failed. A replica meets a Redis
// that stopped answering once, not once per store: while a failure is
// recent (within redisRetryEvery, the breaker's own retry period) every
// closed breaker sharing the Outage opens without a call of its own
// (breaker.joinOutage), so the send limiter's hasty requests
// (Request.Hasty) and the producer ingress quotas are decided locally at
// once; each breaker's probe finds Redis back. A nil *Outage knows nothing.
// Safe for concurrent use.
type Outage struct {
	failed atomic.Int64 // Unix ns of the last failure; 0: none (long ago)
}

// Failed records that a Redis call of this process failed now.
func (o *Outage) Failed() {
	if o != nil {
		o.failed.Store(time.Now().UnixNano())
	}
}

// Recent reports whether a Redis call of this process failed less than
// redisRetryEvery ago.
func (o *Outage) Recent() bool {
	if o == nil {
		return false
	}
	return time.Now().UnixNano()-o.failed.Load() < int64(redisRetryEvery)
}
