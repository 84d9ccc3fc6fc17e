package config

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"smsgw/internal/sms"
)

// Sender pools: a producer's request that names no from is sent from one
// of the producer's senders for its class (producers[].sender_pools), the
// one its recipient was last sent from while that lasts
// (producers[].sender_pool_sticky_for), else the pool's sender with the
// earliest free slot (admission/pools.go).

// DefaultSenderPoolStickyFor is producers[].sender_pool_sticky_for when it
// is 0: a recipient keeps its sender for a day after the last message sent
// to it, so a conversation (a reply, a STOP) stays with one number.
const DefaultSenderPoolStickyFor = 24 * time.Hour

// Bounds of producers[].sender_pool_sticky_for.
const (
	MinSenderPoolStickyFor = time.Minute
	MaxSenderPoolStickyFor = 31 * 24 * time.Hour
)

// MaxSenderPoolSize bounds one pool's senders.
const MaxSenderPoolSize = 64

// StickyFor is how long a recipient keeps its pool sender after the last
// message to it.
func (p Producer) StickyFor() time.Duration {
	if p.SenderPoolStickyFor == 0 {
		return DefaultSenderPoolStickyFor
	}
	return p.SenderPoolStickyFor
}

// SenderPool is the producer's pool for class, normalized
// (sms.NormalizeSender), or nil when it has none.
func (p Producer) SenderPool(class sms.Class) []string {
	pool := p.SenderPools[class.String()]
	if len(pool) == 0 {
		return nil
	}
	out := make([]string, len(pool))
	for i, s := range pool {
		if n, err := sms.NormalizeSender(s); err == nil {
			s = n
		}
		out[i] = s
	}
	return out
}

// validateSenderPools checks producers[].sender_pools and
// sender_pool_sticky_for of the producer at key.
func validateSenderPools(p *problems, key string, pr Producer) {
	if d := pr.SenderPoolStickyFor; d != 0 && (d < MinSenderPoolStickyFor || d > MaxSenderPoolStickyFor) {
		p.add(key+".sender_pool_sticky_for", "must be 0 (the default, %s) or from %s to %s",
			DefaultSenderPoolStickyFor, MinSenderPoolStickyFor, MaxSenderPoolStickyFor)
	}
	allowed := map[string]bool{}
	for _, s := range pr.Senders {
		if n, err := sms.NormalizeSender(s); err == nil {
			allowed[n] = true
		}
	}
	for _, class := range slices.Sorted(maps.Keys(pr.SenderPools)) {
		k := key + ".sender_pools." + class
		cl, err := sms.ParseClass(class)
		switch {
		case err != nil:
			p.add(k, "unknown class (one of otp, transactional, marketing)")
			continue
		case !slices.Contains(pr.Classes, cl.String()):
			p.add(k, "the producer may not send class %s (producers[].classes)", class)
		}
		pool := pr.SenderPools[class]
		if len(pool) == 0 {
			p.add(k, "must list at least one sender")
		}
		if len(pool) > MaxSenderPoolSize {
			p.add(k, "has %d senders; at most %d", len(pool), MaxSenderPoolSize)
		}
		validateSenderList(p, k, pool, allowed)
	}
}

// validateSenderList checks the senders of a list at key: each valid and
// non-empty, none twice however written, and, when allowed is not empty,
// each one of allowed (normalized).
func validateSenderList(p *problems, key string, list []string, allowed map[string]bool) {
	seen := map[string]bool{}
	for j, s := range list {
		k := fmt.Sprintf("%s[%d]", key, j)
		n, err := sms.NormalizeSender(s)
		switch {
		case s == "":
			p.add(k, "must not be empty")
		case err != nil:
			p.add(k, "%v", err)
		case seen[n]:
			p.add(k, "duplicate sender %q (the same number however written)", s)
		case len(allowed) > 0 && !allowed[n]:
			p.add(k, "is not one of the producer's senders (producers[].senders)")
		}
		seen[n] = true
	}
}
