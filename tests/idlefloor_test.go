package tests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The floor under TestFleetIdle's "taken within 5 ms": what one wake-up
// and one round trip cost on this machine between two processes that
// were idle, with nothing of smsgw in between.
//
// A message enqueued elsewhere reaches an idle replica as a token its
// blocking pop receives; the replica then takes the message (a round
// trip) and reserves its slot (another) before the provider call starts.
// Here the test pushes a token after 100 to 250 ms of quiet, an echo
// process (this test binary, run by TestMain with echoEnv set) pops it and
// pushes it back at once, and the test times push → echo: one wake of an
// idle process and one round trip, the first two of the real path's
// three hops. It also times a plain PING after as long a quiet.

// echoEnv makes the test binary the echo process of TestIdleWakeFloor
// (its value is the Redis address).
const echoEnv = "SMSGW_IDLE_ECHO_ADDR"

// The LISTs of the echo.
const (
	echoIn  = "idlefloor:in"
	echoOut = "idlefloor:out"
)

// echoWakes pops every token pushed on echoIn and pushes it on echoOut,
// until it pops "stop". It is the whole of the echo process.
func echoWakes(addr string) int {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	ctx := context.Background()
	for {
		got, err := c.BLPop(ctx, 0, echoIn).Result()
		if err != nil {
			fmt.Fprintln(os.Stderr, "echo:", err)
			return 1
		}
		if got[1] == "stop" {
			return 0
		}
		if err := c.RPush(ctx, echoOut, got[1]).Err(); err != nil {
			fmt.Fprintln(os.Stderr, "echo:", err)
			return 1
		}
	}
}

func TestIdleWakeFloor(t *testing.T) {
	fleetOnly(t)
	addr := startPrivateRedis(t)
	echo := exec.CommandContext(t.Context(), os.Args[0]) //nolint:gosec // this test binary, as the echo process
	echo.Env = append(os.Environ(), echoEnv+"="+addr)
	echo.Stderr = os.Stderr
	if err := echo.Start(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	ctx := t.Context()
	defer func() {
		_ = c.RPush(context.Background(), echoIn, "stop").Err()
		if err := echo.Wait(); err != nil {
			t.Errorf("echo process: %v", err)
		}
	}()
	// The echo is up once it answers a first token.
	if err := c.RPush(ctx, echoIn, "hello").Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.BLPop(ctx, 10*time.Second, echoOut).Result(); err != nil || got[1] != "hello" {
		t.Fatalf("the echo process did not answer: %v %v", got, err)
	}
	const n = 100
	var wake, ping []time.Duration
	for i := range n {
		time.Sleep(time.Duration(100+i*37%150) * time.Millisecond)
		t0 := time.Now()
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		ping = append(ping, time.Since(t0))
		time.Sleep(time.Duration(100+i*53%150) * time.Millisecond)
		token := strconv.Itoa(i)
		t0 = time.Now()
		if err := c.LPush(ctx, echoIn, token).Err(); err != nil {
			t.Fatal(err)
		}
		got, err := c.BLPop(ctx, 10*time.Second, echoOut).Result()
		if err != nil {
			t.Fatalf("token %s: no echo: %v", token, err)
		}
		if got[1] != token {
			t.Fatalf("echo of token %s is %q", token, got[1])
		}
		wake = append(wake, time.Since(t0))
	}
	t.Logf("after 100-250 ms of quiet, %d samples each: PING round trip %s; push → idle process woken → its push back received %s",
		n, percentiles(ping), percentiles(wake))
}

// percentiles formats p50, p90, p95 and the max of d (sorted in place).
func percentiles(d []time.Duration) string {
	slices.Sort(d)
	at := func(q int) string {
		return fmt.Sprintf("%.2f", float64(d[min(len(d)-1, len(d)*q/100)].Microseconds())/1000)
	}
	return "p50 " + at(50) + " ms, p90 " + at(90) + " ms, p95 " + at(95) + " ms, max " + at(100) + " ms"
}
