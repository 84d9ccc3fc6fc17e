// Package redistest gives tests real Redis servers: the shared one on
// 127.0.0.1:6379, private redis-server processes on free ports (to kill and
// restart), and a real 3-master Redis Cluster. It never fakes Redis.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SharedAddr is the Redis every test may use with its own key prefix.
const SharedAddr = "127.0.0.1:6379"

// Addr returns the shared Redis address, failing the test when it does not
// answer: a missing Redis is a broken test environment, never a skip.
func Addr(t testing.TB) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: SharedAddr})
	defer closeClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("redistest: Redis at %s does not answer (%v); start it with: redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no", SharedAddr, err)
	}
	return SharedAddr
}

// Prefix returns a random name, unique per call, to use as an account or key
// prefix so that tests run in parallel on one Redis.
func Prefix(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

// Client returns a client of the shared Redis, closed when the test ends.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: Addr(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ServerOptions configures a private redis-server.
type ServerOptions struct {
	AppendOnly bool     // appendonly yes, appendfsync always
	Args       []string // extra redis-server arguments
	// Nice, when not 0, is the scheduling priority (nice value) of the
	// server's main thread: below 0 it takes a core ahead of this
	// machine's other work, as a Redis on a node of its own would (root
	// or CAP_SYS_NICE needed).
	Nice int
}

// Server is a private redis-server process.
type Server struct {
	Addr string
	Port int
	Dir  string

	t    testing.TB
	opts ServerOptions
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func binary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("redistest: %s not found on PATH; install it (Debian: apt-get install redis-server)", name)
	}
	return p
}

// freePort finds a TCP port that is free, and whose cluster bus port
// (port+10000) is free too. Both lie below 32768, where Linux starts handing
// out ephemeral ports for outgoing connections: a server stopped and started
// again on its port (StartServer's Stop/Start) must not find it taken by
// some client's connection meanwhile.
func freePort(t testing.TB) int {
	t.Helper()
	for i := 0; i < 200; i++ {
		var b [2]byte
		_, _ = rand.Read(b[:])
		p := 10000 + (int(b[0])<<8|int(b[1]))%12768 // p in [10000, 22767], bus port below 32768
		if portFree(p) && portFree(p+10000) {
			return p
		}
	}
	t.Fatal("redistest: no free port found")
	return 0
}

func portFree(p int) bool {
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// StartServer starts a private redis-server on a free port and stops it
// when the test ends.
func StartServer(t testing.TB, opts ServerOptions) *Server {
	t.Helper()
	port := freePort(t)
	s := &Server{Port: port, Addr: fmt.Sprintf("127.0.0.1:%d", port), Dir: t.TempDir(), t: t, opts: opts}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Start (re)starts the server on the same port and data directory and waits
// until it answers.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	args := []string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--dir", s.Dir,
		"--save", "", "--daemonize", "no", "--logfile", filepath.Join(s.Dir, "redis.log")}
	if s.opts.AppendOnly {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	args = append(args, s.opts.Args...)
	// The server lives until Stop (or the test's cleanup), not a context.
	cmd := exec.Command(binary(s.t, "redis-server"), args...) //nolint:noctx // see above
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start redis-server: %v", err)
	}
	s.cmd = cmd
	s.done = make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	if s.opts.Nice != 0 {
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, cmd.Process.Pid, s.opts.Nice); err != nil {
			s.t.Fatalf("redistest: nice %d for redis-server: %v (root or CAP_SYS_NICE needed)", s.opts.Nice, err)
		}
	}
	if err := waitPing(s.Addr, 10*time.Second); err != nil {
		s.t.Fatalf("redistest: redis-server on %s did not come up: %v\n%s", s.Addr, err, s.logTail())
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// Stop shuts the server down gracefully (SIGTERM; with AOF it flushes).
func (s *Server) Stop() { s.halt(os.Interrupt) }

// Kill ends the server with SIGKILL.
func (s *Server) Kill() { s.halt(os.Kill) }

// Freeze stops the server with SIGSTOP: it keeps its port and its
// connections but answers nothing, as a Redis whose host vanished (a
// killed container, a partition) does: callers wait for their timeouts
// instead of being refused. Thaw resumes it.
func (s *Server) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (s *Server) Thaw() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

func (s *Server) halt(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

func waitPing(addr string, within time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer func() { _ = c.Close() }() // a probe client: its close cannot fail the wait
	deadline := time.Now().Add(within)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err = c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// SkipClusterEnv is the variable that, set to 1, skips the cluster tests. It is the only way they
// are skipped: a machine without redis-server fails them.
const SkipClusterEnv = "SMSGW_SKIP_CLUSTER"

// StartCluster starts a real Redis Cluster of 3 masters on free ports and
// returns their addresses (seeds for redis.NewClusterClient). It is torn down
// when the test ends.
func StartCluster(t testing.TB) []string {
	t.Helper()
	if os.Getenv(SkipClusterEnv) == "1" {
		t.Skipf("redistest: %s=1, skipping Redis Cluster test", SkipClusterEnv)
	}
	var addrs []string
	for i := 0; i < 3; i++ {
		s := StartServer(t, ServerOptions{Args: []string{"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}})
		addrs = append(addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	// Creating the cluster takes a second or two; a minute only bounds a hang.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary(t, "redis-cli"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := waitClusterOK(addrs, 20*time.Second); err != nil {
		t.Fatalf("redistest: cluster did not become ok: %v", err)
	}
	return addrs
}

func waitClusterOK(addrs []string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ok := true
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			info, err := c.ClusterInfo(context.Background()).Result()
			_ = c.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				ok = false
				break
			}
		}
		if ok {
			// Every node must also agree on the full slot map.
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
			err := c.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
				return m.Ping(ctx).Err()
			})
			_ = c.Close()
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster_state not ok after %s", within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ClusterClient returns a cluster client for addrs, closed when the test ends.
func ClusterClient(t testing.TB, addrs []string) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// DeleteTagged removes every key of the shared Redis whose name starts
// with tag (an account's keys), once a test is done with them. A failure is
// logged, not failed: the keys carry the test's random prefix.
func DeleteTagged(t testing.TB, tag string) {
	c := redis.NewClient(&redis.Options{Addr: SharedAddr})
	defer closeClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys, err := c.Keys(ctx, tag+"*").Result()
	if err == nil && len(keys) > 0 {
		err = c.Del(ctx, keys...).Err()
	}
	if err != nil {
		t.Logf("redistest: delete the keys tagged %s: %v", tag, err)
	}
}

// closeClient closes a client the test no longer needs; a failure to close
// it is worth a log line, not a failed test.
func closeClient(t testing.TB, c *redis.Client) {
	t.Helper()
	if err := c.Close(); err != nil {
		t.Logf("redistest: close client: %v", err)
	}
}

// RoundTrips is a go-redis hook that counts round trips to Redis: a
// command or a whole pipeline is one (add it with Client.AddHook, read N).
type RoundTrips struct{ n atomic.Int64 }

// N is how many round trips went through the hook so far.
func (h *RoundTrips) N() int64 { return h.n.Load() }

// DialHook passes dials through uncounted.
func (h *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts one command.
func (h *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts one pipeline, however many commands it holds.
func (h *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// ServerCPU is the CPU time (user and system) the Redis server behind c
// has used since it started, from INFO cpu: what a benchmark divides by its
// operations to report Redis's own cost, which other load on the machine
// moves far less than wall-clock figures.
func ServerCPU(t testing.TB, c *redis.Client) time.Duration {
	t.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for line := range strings.Lines(info) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("INFO cpu: %s: %v", name, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// CommandStats reads INFO commandstats of the server behind c: calls per
// command (the scripts' own calls counted under their commands) and their
// total.
func CommandStats(t testing.TB, c *redis.Client) (map[string]int64, int64) {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	calls := map[string]int64{}
	var total int64
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for kv := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("INFO commandstats: %s: %v", name, err)
				}
				calls[strings.TrimPrefix(name, "cmdstat_")] = n
				total += n
			}
		}
	}
	return calls, total
}
