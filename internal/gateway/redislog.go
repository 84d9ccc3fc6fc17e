package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/logsample"
	"smsgw/internal/provider"
)

// SetRedisLogger sends the Redis client's own messages (a pool that cannot
// dial, a failed health check) through log, as WARN records, instead of
// the client's default plain-text lines on stderr, which break a JSON log
// pipeline in the middle of an outage. At most one record every
// redisLogEvery; the ones left out are counted in the next. The client's
// logger is process-wide: the serve command sets it once.
func SetRedisLogger(log *slog.Logger) {
	redis.SetLogger(newRedisLogger(log, time.Now))
}

// redisLogEvery bounds how often the Redis client's messages are logged:
// during an outage it writes one per failed dial of every pool.
const redisLogEvery = 10 * time.Second

type redisLogger struct {
	log     *slog.Logger
	now     func() time.Time
	sampler logsample.Sampler
}

func newRedisLogger(log *slog.Logger, now func() time.Time) *redisLogger {
	return &redisLogger{log: log, now: now}
}

// Printf is the go-redis logging interface.
func (l *redisLogger) Printf(ctx context.Context, format string, v ...any) {
	n, ok := l.sampler.Add(l.now(), redisLogEvery)
	if !ok {
		return
	}
	// Scrubbed like any outside text: an address, never a number, is
	// expected here.
	l.log.WarnContext(ctx, "redis client: "+provider.Scrub(fmt.Sprintf(format, v...), ""), "not_logged_since_last", n-1)
}
