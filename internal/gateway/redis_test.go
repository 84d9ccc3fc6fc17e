package gateway

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/provider/sim"
	"smsgw/internal/redistest"
)

// writeCert makes a certificate for name signed by ca (self-signed when ca
// is nil), writes it and its key as PEM into dir, and returns their paths.
func writeCert(t *testing.T, dir, name string, isCA bool, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (string, string, *x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{name},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:        isCA, BasicConstraintsValid: true}
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca, caKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kder, _ := x509.MarshalECPrivateKey(key)
	certPath, keyPath := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath, cert, key
}

// TestRedisTLSClientCert: the gateway reaches a Redis
// that speaks only TLS and requires a client certificate, checking the
// server against our own CA under a server name other than its address.
func TestRedisTLSClientCert(t *testing.T) {
	dir := t.TempDir()
	caCrt, _, ca, caKey := writeCert(t, dir, "test-ca", true, nil, nil)
	srvCrt, srvKey, _, _ := writeCert(t, dir, "redis.internal", false, ca, caKey)
	cliCrt, cliKey, _, _ := writeCert(t, dir, "smsgw-client", false, ca, caKey)
	l, err := new(net.ListenConfig).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tlsPort := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	redistest.StartServer(t, redistest.ServerOptions{Args: []string{"--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", srvCrt, "--tls-key-file", srvKey, "--tls-ca-cert-file", caCrt, "--tls-auth-clients", "yes"}})

	s := newSim(t, sim.Config{})
	cfg := testConfig(t, redisMode, s.URL())
	cfg.Redis.Addr = "127.0.0.1:" + strconv.Itoa(tlsPort)
	cfg.Redis.TLS = true
	cfg.Redis.TLSCAFile, cfg.Redis.TLSServerName = caCrt, "redis.internal"
	cfg.Redis.TLSCertFile, cfg.Redis.TLSKeyFile = cliCrt, cliKey
	h := startWith(t, cfg, s)
	wantStatus(t, h.get("/readyz", ""), http.StatusOK)
	a := accepted(t, h.post("/v1/messages", keyNotify, msg("transactional")))
	eventually(t, "the message to be sent through the TLS Redis", func() bool { return sentRefs(s)[a.ID] == 1 })
	keyPEM, _ := os.ReadFile(cliKey)
	if strings.Contains(h.logs.String(), "PRIVATE KEY") || strings.Contains(h.logs.String(), string(keyPEM[40:80])) {
		t.Error("the client key is in the logs")
	}
}

// TestRedisLogger: the Redis client's messages become JSON WARN records of
// our logger, at most one per redisLogEvery, with the count of those left
// out, and digit runs masked.
func TestRedisLogger(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_700_000_000, 0)
	l := newRedisLogger(slog.New(slog.NewJSONHandler(&buf, nil)), func() time.Time { return now })
	ctx := context.Background()
	l.Printf(ctx, "redis: connection pool: failed to dial after %d attempts: %s", 5, "dial tcp 127.0.0.1:16399: connect: connection refused")
	for range 3 {
		now = now.Add(time.Second)
		l.Printf(ctx, "redis: connection pool: failed to dial after %d attempts", 5)
	}
	now = now.Add(redisLogEvery)
	l.Printf(ctx, "redis: %s", "+819012345678 in a message")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d records, want 2 (the others left out):\n%s", len(lines), buf.String())
	}
	var recs []map[string]any
	for _, line := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not a JSON record: %q", line)
		}
		recs = append(recs, r)
	}
	if recs[0]["level"] != "WARN" || !strings.Contains(recs[0]["msg"].(string), "failed to dial after 5 attempts") {
		t.Errorf("first record %v", recs[0])
	}
	if recs[1]["not_logged_since_last"] != float64(3) {
		t.Errorf("second record counts %v left out, want 3", recs[1]["not_logged_since_last"])
	}
	if strings.Contains(buf.String(), "9012345678") {
		t.Errorf("a number reached the log: %s", buf.String())
	}
}

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

// TestIdleReplicaLeavesFallback: after a Redis outage, a replica with
// nothing to send and no producer posting goes back to the shared
// schedule once Redis answers, and its mode gauges say so. Before the
// probe both limiters stayed in fallback (smsgw_limiter_mode and
// smsgw_limiter_ingress_mode, so SmsgwLimiterFallback kept firing) until
// the next decision: 40 s after Redis was back, still fallback.
func TestIdleReplicaLeavesFallback(t *testing.T) {
	h, srv := startOwnRedis(t, redistest.ServerOptions{})
	wantStatus(t, h.post("/v1/otp", keyLogin, otpBody()), http.StatusOK)
	modes := func() map[string]float64 {
		return metricValues(string(h.get("/metrics", "").body), "smsgw_limiter_mode", "smsgw_limiter_ingress_mode")
	}
	inMode := func(mode string) func() bool {
		return func() bool {
			m := modes()
			return m[`smsgw_limiter_mode{mode="`+mode+`"}`] == 1 && m[`smsgw_limiter_ingress_mode{mode="`+mode+`"}`] == 1
		}
	}
	srv.Stop()
	// Decisions while Redis is down send both limiters to their fallback.
	h.post("/v1/otp", keyLogin, otpBody())
	eventually(t, "both limiters in fallback while Redis is down", inMode("fallback"))
	srv.Start()
	// No request from here on: only the probe can tell them Redis is back.
	eventually(t, "both limiters back on the shared schedule with no traffic", inMode("shared"))
}
