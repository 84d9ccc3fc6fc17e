package gateway

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A command that fails because its node is gone rereads the Cluster's slot
// map (once per topologyReloadEvery); an answer or a missing key does not.
func TestTopologyReloadOnDeadNode(t *testing.T) {
	var reloads atomic.Int32
	done := make(chan struct{}, 4)
	h := &topologyReloader{reload: func(context.Context) { reloads.Add(1); done <- struct{}{} }}
	run := h.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	_ = run(context.Background(), redis.NewCmd(context.Background(), "ping"))
	h.after(redis.Nil)
	h.after(errors.New("ERR unknown"))
	if n := reloads.Load(); n != 0 {
		t.Fatalf("%d reloads without a dead node", n)
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	h.after(refused)
	h.after(refused) // within the period: no second reload
	<-done
	if n := reloads.Load(); n != 1 {
		t.Fatalf("%d reloads after two failures in one period, want 1", n)
	}
	h.last.Store(time.Now().Add(-2 * topologyReloadEvery).UnixNano())
	h.after(refused)
	<-done
	if n := reloads.Load(); n != 2 {
		t.Fatalf("%d reloads, want 2 after the period", n)
	}
}
