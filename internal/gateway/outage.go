package gateway

import (
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/provider"
)

// outageRetryAfter is the Retry-After of an answer refused because a
// dependency is down or slow: the limiter's breaker tries Redis again once a
// second, so a client that waits this long finds it back as soon as we do.
const outageRetryAfter = time.Second

// dependencyDown reports whether err says a dependency (Redis, the disk of
// the embedded store) is down, slow or refusing for now, rather than that
// the request or our code is wrong. Such an error is answered 503 with
// Retry-After, never 500 (docs/design.md section 6).
func dependencyDown(err error) bool {
	var ne net.Error
	switch {
	case err == nil:
		return false
	case errors.As(err, &ne), // timeouts, refused or reset connections, DNS
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), // the connection dropped mid-reply
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ENOSPC), // the embedded store's disk is full
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted), errors.Is(err, redis.ErrClosed):
		return true
	}
	// Redis answers that say "not now" rather than "wrong request".
	return redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsClusterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsMasterDownError(err) || redis.IsMaxClientsError(err) ||
		redis.IsOOMError(err) || redis.IsNoReplicasError(err) || redis.HasErrorPrefix(err, "BUSY")
}

// logPath is the request path as logs and problems show it: a path can
// carry a number (DELETE /v1/admin/suppressions/{number}), so digit runs
// are masked with the one scrub of outside text, and it is the client's
// (up to the server's header limit), so at most maxInstanceLen bytes are
// shown; only the first 4 × maxInstanceLen are scrubbed at all.
func logPath(r *http.Request) string {
	return cutPath(provider.Scrub(cutPath(r.URL.Path, 4*maxInstanceLen), ""), maxInstanceLen)
}
