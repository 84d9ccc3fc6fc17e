package limiter

import "github.com/redis/go-redis/v9"

// productionOptions are the client options the gateway gives go-redis
// (gateway's newRedisClient) for a Redis at addr: a context's deadline
// bounds each command, and a connection is dialed once per try. A limiter
// test that kills or freezes its Redis then sees what a replica sees,
// instead of go-redis's defaults (up to 3 s per try and five dials per
// connection), which only stretch the test.
func productionOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialerRetries: 1}
}
