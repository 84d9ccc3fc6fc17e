package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestDependencyDownKinds: what is an outage (503 + Retry-After) and what
// is our bug (500, logged). A bare system error is an outage only when it
// says the store's disk cannot take writes; a syscall.Errno is also a
// net.Error, so EBADF or EINVAL used to pass for one.
func TestDependencyDownKinds(t *testing.T) {
	t.Parallel()
	file := func(e syscall.Errno) error { return &os.PathError{Op: "write", Path: "/data/smsgw.db", Err: e} }
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{file(syscall.ENOSPC), true},
		{file(syscall.EDQUOT), true},
		{file(syscall.EROFS), true},
		{file(syscall.EIO), true},
		{fmt.Errorf("store: %w", file(syscall.EFBIG)), true},
		{file(syscall.EBADF), false},
		{file(syscall.EINVAL), false},
		{syscall.EACCES, false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{io.ErrUnexpectedEOF, true},
		{redis.ErrPoolTimeout, true},
		{errors.New("unexpected reply"), false},
		{nil, false},
	} {
		if got := DependencyDown(tc.err); got != tc.want {
			t.Errorf("dependencyDown(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestStoreFullSaysSo: the embedded store's disk full (or over quota) is a
// 503 that says so, not "a dependency is down or slow".
func TestStoreFullSaysSo(t *testing.T) {
	t.Parallel()
	for _, e := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT} {
		a := toError(fmt.Errorf("enqueue: %w", &os.PathError{Op: "write", Path: "/data/smsgw.db", Err: e}))
		if a.Kind != kindUnavailable || a.RetryAfter <= 0 || !strings.Contains(a.Detail, "disk is full") {
			t.Errorf("%v: kind %v, Retry-After %s, detail %q; want unavailable, a Retry-After, 'disk is full'", e, a.Kind, a.RetryAfter, a.Detail)
		}
	}
}
