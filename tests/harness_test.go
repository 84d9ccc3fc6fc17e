// Package tests holds the end-to-end and fault tests: they build the smsgw
// binary, start real gateway processes, a real provider simulator process
// and private Redis servers, and assert what the provider received.
package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"smsgw/internal/testclient"
)

var smsgwBin string

func TestMain(m *testing.M) {
	if addr := os.Getenv(echoEnv); addr != "" {
		os.Exit(echoWakes(addr)) // the idle process of TestIdleWakeFloor
	}
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "smsgw-e2e-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = os.RemoveAll(dir) }() // a temporary directory: the OS cleans up what stays
		smsgwBin = filepath.Join(dir, "smsgw")
		build := exec.Command("go", "build", "-o", smsgwBin, "../cmd/smsgw") //nolint:noctx // TestMain has no context; the build ends on its own
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: build smsgw:", err)
			return 1
		}
		return m.Run()
	}())
}

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
}

// freePort returns a TCP port nobody listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := new(net.ListenConfig).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }() // only the port number was wanted
	return l.Addr().(*net.TCPAddr).Port
}

// proc is a child process of the test whose output goes to a log file,
// shown when the test fails.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	mu   sync.Mutex
	dead bool
}

// childEnv is this test process's environment without the variables that
// steer the tests themselves (SMSGW_FLEET, SMSGW_FLEET_N): they share the
// SMSGW_ prefix, and smsgw refuses to start on an SMSGW_ variable that names
// no configuration key.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SMSGW_FLEET=") || strings.HasPrefix(kv, "SMSGW_FLEET_N=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// The process lives until p.Kill (or the test's cleanup), not a context.
	cmd := exec.Command(smsgwBin, args...) //nolint:noctx // see above
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(childEnv(), "GORACE=halt_on_error=1")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{t: t, name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = f.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("---- %s log (tail) ----\n%s", name, b)
		}
	})
	return p
}

// Kill sends SIGKILL and waits for the process to end.
func (p *proc) Kill() { p.signal(syscall.SIGKILL, 5*time.Second) }

// Term sends SIGTERM and waits up to d for a graceful exit.
func (p *proc) Term(d time.Duration) { p.signal(syscall.SIGTERM, d) }

func (p *proc) signal(sig syscall.Signal, wait time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(wait):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.dead = true
}

func (p *proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitHTTP polls url until it answers 200 or d passes.
func waitHTTP(t *testing.T, p *proc, url string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if p.Exited() {
			t.Fatalf("%s exited before %s answered", p.name, url)
		}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: %s did not answer 200 within %s", p.name, url, d)
}

// ---- the provider simulator ----

type simProc struct {
	*proc
	URL string
}

func startSim(t *testing.T, args ...string) *simProc {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p := startProc(t, "sim", append([]string{"sim", "--listen", addr}, args...)...)
	s := &simProc{proc: p, URL: "http://" + addr}
	waitHTTP(t, p, s.URL+"/healthz", 20*time.Second)
	return s
}

type latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

type simStats struct {
	Accepted     int                `json:"accepted"`
	Rejected429  int                `json:"rejected_429"`
	Rejected403  int                `json:"rejected_403"`
	Suspended    bool               `json:"suspended"`
	Suspensions  int                `json:"suspensions"`
	MaxInAny1s   int                `json:"max_in_any_1s"`
	Duplicates   int                `json:"duplicates"`
	Replays      int                `json:"replays"` // retries absorbed by the provider's Idempotency-Key
	PerClass     map[string]int     `json:"per_class"`
	Latency      map[string]latency `json:"latency"`
	AchievedRate float64            `json:"achieved_rate"`
}

type simRecord struct {
	At         time.Time     `json:"at"`
	Elapsed    time.Duration `json:"elapsed_ns"` // At on the simulator's monotonic clock: intervals are read from it
	Arrived    time.Time     `json:"arrived"`
	Reference  string        `json:"reference"`
	From       string        `json:"from"`
	Class      string        `json:"class"`
	Units      int           `json:"units"`
	AcceptedAt time.Time     `json:"accepted_at"`
	Duplicate  bool          `json:"duplicate"`
}

func (s *simProc) Stats(t *testing.T) simStats {
	t.Helper()
	var st simStats
	getJSON(t, s.URL+"/stats", &st)
	return st
}

func (s *simProc) Accepted(t *testing.T) []simRecord {
	t.Helper()
	var recs []simRecord
	getJSON(t, s.URL+"/accepted", &recs)
	return recs
}

func (s *simProc) Control(t *testing.T, body string) {
	t.Helper()
	if resp := testclient.PostJSON(t, s.URL+"/control", body); resp.Status != http.StatusOK {
		t.Fatalf("sim control %s: %d %s", body, resp.Status, resp.Body)
	}
}

// WaitAccepted waits until the simulator has accepted n messages.
func (s *simProc) WaitAccepted(t *testing.T, n int, d time.Duration) simStats {
	t.Helper()
	deadline := time.Now().Add(d)
	var st simStats
	for time.Now().Before(deadline) {
		st = s.Stats(t)
		if st.Accepted >= n {
			return st
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("sim accepted %d of %d within %s (stats %+v)", st.Accepted, n, d, st)
	return st
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp := testclient.Do(t, nil, testclient.New(t, http.MethodGet, url, ""))
	if resp.Status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.Status, resp.Body)
	}
	if err := json.Unmarshal(resp.Body, v); err != nil {
		t.Fatalf("GET %s: decode: %v", url, err)
	}
}

// ---- gateways ----

const (
	keyMarketing = "e2e-marketing-key-000000"
	keyOTP       = "e2e-otp-key-000000000000"
	keyTxn       = "e2e-txn-key-000000000000"
	keyAdmin     = "e2e-admin-key-0000000000"
)

type gwOptions struct {
	RedisAddr string // empty: embedded store
	// RedisMaster is the Sentinel master name (RedisAddr: the sentinels).
	RedisMaster string
	Account     string
	SimURL      string
	Lease       time.Duration
	Extra       string // more YAML appended to the config
	// NotifyExtra goes inside the notify producer's flow mapping
	// (", webhook: {...}").
	NotifyExtra string
	// CampaignExtra is the same for the campaign producer, LoginExtra for
	// the login producer.
	CampaignExtra string
	LoginExtra    string
}

type gwProc struct {
	*proc
	URL string
}

func gatewayConfig(listen string, o gwOptions, storeDir string) string {
	lease := o.Lease
	if lease == 0 {
		lease = 5 * time.Second
	}
	return fmt.Sprintf(`listen: %q
redis: {addr: %q, master_name: %q}
store: {path: %q}
account: %q
provider: {kind: http, url: %q, timeout: 2s}
producers:
  - {name: campaign, key: %q, classes: [marketing], rate: 100000, burst: 100000%s}
  - {name: login, key: %q, classes: [otp], rate: 1000, burst: 1000%s}
  - {name: notify, key: %q, classes: [transactional], rate: 100000, burst: 100000%s}
admin: {key: %q}
dispatch: {lease: %s, backoff_base: 200ms, backoff_max: 2s, shutdown_timeout: 5s}
log: {level: info, format: text}
%s`, listen, o.RedisAddr, o.RedisMaster, storeDir, o.Account, o.SimURL+"/send", keyMarketing, o.CampaignExtra, keyOTP, o.LoginExtra, keyTxn, o.NotifyExtra, keyAdmin, lease, o.Extra)
}

func startGateway(t *testing.T, name string, o gwOptions) *gwProc {
	t.Helper()
	return startGatewayIn(t, name, fmt.Sprintf("127.0.0.1:%d", freePort(t)), t.TempDir(), o)
}

// startGatewayIn starts a gateway listening on addr with its store under
// dir, so that a test can name its URL before it starts (a simulator
// posting receipts to it) and start it again on the same store.
func startGatewayIn(t *testing.T, name, addr, dir string, o gwOptions) *gwProc {
	t.Helper()
	cfgPath := filepath.Join(dir, "smsgw.yaml")
	if err := os.WriteFile(cfgPath, []byte(gatewayConfig(addr, o, filepath.Join(dir, "data"))), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, name, "serve", "--config", cfgPath)
	g := &gwProc{proc: p, URL: "http://" + addr}
	waitHTTP(t, p, g.URL+"/readyz", 30*time.Second)
	return g
}

type postResult struct {
	Status int
	ID     string
	Body   []byte
	Header http.Header
}

func post(t *testing.T, url, key string, body any, hdr ...string) postResult {
	t.Helper()
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req := testclient.New(t, http.MethodPost, url, string(b), append([]string{"Authorization", "Bearer " + key}, hdr...)...)
	resp := testclient.Do(t, nil, req.WithContext(ctx))
	var v struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(resp.Body, &v)
	return postResult{Status: resp.Status, ID: v.ID, Body: resp.Body, Header: resp.Header}
}

// message is a producer request body.
type message struct {
	To    string `json:"to"`
	Body  string `json:"body"`
	Class string `json:"class"`
}

// phone returns a valid Japanese mobile number, distinct for each i.
func phone(i int) string { return "+8190" + fmt.Sprintf("%08d", 10000000+i%90000000) }

// postCampaign posts a marketing campaign of n messages spread evenly over
// the gateways (the last takes the remainder) and returns the accepted ids.
func postCampaign(t *testing.T, gws []*gwProc, n int) []string {
	t.Helper()
	var ids []string
	per := n / len(gws)
	for i, gw := range gws {
		k := per
		if i == len(gws)-1 {
			k = n - per*(len(gws)-1)
		}
		ids = append(ids, postBatch(t, gw, keyMarketing, "marketing", i*per, k)...)
	}
	return ids
}

// batchAnswer is the answer to POST /v1/messages/batch: each message's
// status and, when accepted, its id.
type batchAnswer struct {
	Results []struct {
		Status  int `json:"status"`
		Message struct {
			ID string `json:"id"`
		} `json:"message"`
	} `json:"results"`
}

// postBatch posts n messages of class with the key through /v1/messages/batch
// and returns the accepted ids.
func postBatch(t *testing.T, gw *gwProc, key, class string, start, n int) []string {
	t.Helper()
	var ids []string
	for off := 0; off < n; off += 1000 {
		k := min(1000, n-off)
		msgs := make([]message, k)
		for i := range msgs {
			msgs[i] = message{To: phone(start + off + i), Body: "Sale! " + strconv.Itoa(start+off+i), Class: class}
		}
		r := post(t, gw.URL+"/v1/messages/batch", key, map[string]any{"messages": msgs})
		if r.Status != http.StatusOK && r.Status != http.StatusAccepted && r.Status != http.StatusMultiStatus {
			t.Fatalf("batch: %d %.500s", r.Status, r.Body)
		}
		var res batchAnswer
		if err := json.Unmarshal(r.Body, &res); err != nil {
			t.Fatalf("batch answer: %v: %.300s", err, r.Body)
		}
		for i, x := range res.Results {
			if x.Status != http.StatusAccepted || x.Message.ID == "" {
				t.Fatalf("batch item %d not accepted (status %d)", i, x.Status)
			}
			ids = append(ids, x.Message.ID)
		}
	}
	return ids
}
