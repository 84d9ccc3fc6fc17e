package redisq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

// TestEnqueueUnconfirmedMayBeStored: an enqueue whose script went out but
// got no answer is ErrMaybeStored (the gateway must not answer "nothing was
// queued"); one that never reached Redis, or that Redis refused, is not.
func TestEnqueueUnconfirmedMayBeStored(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, redistest.ServerOptions{Args: []string{"--enable-debug-command", "local"}})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	q := open(t, c, redistest.Prefix(t))
	enqueue(t, q, msg("p", sms.ClassTransactional)) // the script is loaded

	sleeper := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = sleeper.Close() })
	slept := make(chan error, 1)
	go func() { slept <- sleeper.Do(context.Background(), "DEBUG", "SLEEP", "1").Err() }()
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ReadTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = probe.Close() })
	for probe.Ping(t.Context()).Err() == nil {
		time.Sleep(5 * time.Millisecond) // until the stall has begun
	}
	m := msg("p", sms.ClassTransactional)
	if _, err := q.Enqueue(t.Context(), m); !errors.Is(err, queue.ErrMaybeStored) {
		t.Fatalf("enqueue to a stalled Redis: %v, want ErrMaybeStored", err)
	}
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	if got, err := q.Get(t.Context(), m.ID); err != nil || got.Status != sms.StatusQueued {
		t.Fatalf("after the stall: %v, %v; want the message stored after all", got, err)
	}

	srv.Stop()
	if _, err := q.Enqueue(t.Context(), msg("p", sms.ClassTransactional)); err == nil || errors.Is(err, queue.ErrMaybeStored) {
		t.Fatalf("enqueue to a stopped Redis: %v, want an error that is not ErrMaybeStored", err)
	}
}

// mayHaveRun's cases: what went out and got no answer may run; what never
// went out, or that Redis answered, did not.
func TestMayHaveRun(t *testing.T) {
	t.Parallel()
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: &timeoutError{}}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{timeout, true},
		{fmt.Errorf("wrapped: %w", timeout), true},
		{io.EOF, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{&net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}, true},
		{context.DeadlineExceeded, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: &timeoutError{}}, false},
		{redis.ErrPoolTimeout, false},
		{redis.ErrClosed, false},
		{errors.New("unrelated"), false},
	} {
		if got := mayHaveRun(tc.err); got != tc.want {
			t.Errorf("mayHaveRun(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	// An error Redis answered: the script did not run (or ran and failed
	// whole: a script is atomic).
	c := redistest.Client(t)
	err := c.Do(t.Context(), "NOSUCHCOMMAND").Err()
	if err == nil || mayHaveRun(err) {
		t.Errorf("mayHaveRun(%v) = true, want false for Redis's own answer", err)
	}
}

type timeoutError struct{}

func (*timeoutError) Error() string   { return "i/o timeout" }
func (*timeoutError) Timeout() bool   { return true }
func (*timeoutError) Temporary() bool { return true }
