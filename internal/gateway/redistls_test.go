package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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
