package httpapi

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

// DependencyDown reports whether err says a dependency (Redis, the disk of
// the embedded store) is down, slow or refusing for now, rather than that
// the request or our code is wrong. Such an error is answered 503 with
// Retry-After, never 500 (docs/design.md section 6).
func DependencyDown(err error) bool {
	var ne net.Error
	var errno syscall.Errno
	switch {
	case err == nil:
		return false
	case errors.As(err, &errno) && !errors.As(err, new(*net.OpError)):
		// A bare system error (the embedded store's file) is an outage
		// only if it says the disk or its file system is; others (a bad
		// descriptor, an invalid argument) are our bug, answered 500 and
		// logged. A syscall.Errno is also a net.Error, hence this first.
		return storageDown[errno]
	case errors.As(err, &ne), // timeouts, refused or reset connections, DNS
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), // the connection dropped mid-reply
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted), errors.Is(err, redis.ErrClosed):
		return true
	}
	// Redis answers that say "not now" rather than "wrong request".
	return redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsClusterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsMasterDownError(err) || redis.IsMaxClientsError(err) ||
		redis.IsOOMError(err) || redis.IsNoReplicasError(err) || redis.HasErrorPrefix(err, "BUSY")
}

// storageDown are the system errors of a store's file that say its disk
// or file system cannot take writes now: full, over quota, read-only,
// failing, or a file grown past the file system's limit; and the
// connection errors a bare Errno may carry.
var storageDown = map[syscall.Errno]bool{
	syscall.ENOSPC: true, syscall.EDQUOT: true, syscall.EROFS: true, syscall.EIO: true, syscall.EFBIG: true,
	syscall.ECONNREFUSED: true, syscall.ECONNRESET: true, syscall.EPIPE: true, syscall.ETIMEDOUT: true,
}

// logPath is the request path as logs and problems show it: a path can
// carry a number (DELETE /v1/admin/suppressions/{number}), so digit runs
// are masked with the one scrub of outside text, and it is the client's
// (up to the server's header limit), so at most maxInstanceLen bytes are
// shown; only the first 4 × maxInstanceLen are scrubbed at all.
func logPath(r *http.Request) string {
	return cutPath(provider.Scrub(cutPath(r.URL.Path, 4*MaxInstanceLen), ""), MaxInstanceLen)
}
