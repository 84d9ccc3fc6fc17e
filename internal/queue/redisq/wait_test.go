package redisq

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/redistest"
	"smsgw/internal/sms"
)

// With WaitReplicas an enqueue returns only once a replica holds it: on a
// master without a replica it fails with ErrNotReplicated (the message is
// stored on the master alone, and the caller is told to retry), on a
// master with one it succeeds.
func TestEnqueueWaitsForReplicas(t *testing.T) {
	master := redistest.StartServer(t, redistest.ServerOptions{})
	c := redis.NewClient(&redis.Options{Addr: master.Addr})
	t.Cleanup(func() { _ = c.Close() })
	q, err := New(Config{Client: c, Account: redistest.Prefix(t), WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	ctx := context.Background()
	if _, err := q.Enqueue(ctx, msg("p", sms.ClassOTP)); !errors.Is(err, queue.ErrNotReplicated) {
		t.Fatalf("enqueue without a replica: %v, want ErrNotReplicated", err)
	}
	replica := redistest.StartServer(t, redistest.ServerOptions{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port)}})
	_ = replica
	// Once the replica has synced, enqueues are confirmed.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := q.Enqueue(ctx, msg("p", sms.ClassOTP))
		if err == nil {
			break
		}
		if !errors.Is(err, queue.ErrNotReplicated) || time.Now().After(deadline) {
			t.Fatalf("enqueue with a replica: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestNewRejectsWaitWithoutTimeout(t *testing.T) {
	if _, err := New(Config{Client: redistest.Client(t), Account: "a", WaitReplicas: 1}); err == nil {
		t.Fatal("WaitReplicas without WaitTimeout accepted")
	}
}

// On a Cluster the WAIT goes on the connection of the account's master,
// where the enqueue ran: confirmed by that master's replica.
func TestEnqueueWaitsForReplicasCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster with replicas")
	}
	cl := redistest.StartClusterWithReplicas(t, 0)
	q, err := New(Config{Client: redistest.ClusterClient(t, cl.Addrs), Account: redistest.Prefix(t), WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	for range 3 {
		if _, err := q.Enqueue(context.Background(), msg("p", sms.ClassMarketing)); err != nil {
			t.Fatalf("enqueue on a Cluster with replicas: %v", err)
		}
	}
}
