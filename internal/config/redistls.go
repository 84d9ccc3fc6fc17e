package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
)

// TLSConfig is the client TLS of the Redis connection: nil without
// redis.tls. The error names the key at fault; it never quotes a file's
// contents.
func (r RedisConfig) TLSConfig() (*tls.Config, error) {
	if !r.TLS {
		for _, k := range []struct{ key, v string }{{"redis.tls_ca_file", r.TLSCAFile},
			{"redis.tls_server_name", r.TLSServerName}, {"redis.tls_cert_file", r.TLSCertFile}, {"redis.tls_key_file", r.TLSKeyFile}} {
			if k.v != "" {
				return nil, &keyError{k.key, "is set but redis.tls is false; set redis.tls: true"}
			}
		}
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: r.TLSServerName}
	if cfg.ServerName == "" && r.MasterName == "" && len(r.Addrs()) == 1 {
		// go-redis fills it per node for Cluster and Sentinel; one node
		// gets it from its address here.
		if host, _, err := net.SplitHostPort(r.Addrs()[0]); err == nil {
			cfg.ServerName = host
		}
	}
	if r.TLSCAFile != "" {
		pem, err := os.ReadFile(r.TLSCAFile)
		if err != nil {
			return nil, &keyError{"redis.tls_ca_file", fmt.Sprintf("cannot be read: %v", err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &keyError{"redis.tls_ca_file", "holds no PEM certificate"}
		}
		cfg.RootCAs = pool
	}
	switch {
	case (r.TLSCertFile == "") != (r.TLSKeyFile == ""):
		key := "redis.tls_key_file"
		if r.TLSCertFile == "" {
			key = "redis.tls_cert_file"
		}
		return nil, &keyError{key, "must be set with redis.tls_cert_file and redis.tls_key_file both, or neither"}
	case r.TLSCertFile != "":
		cert, err := tls.LoadX509KeyPair(r.TLSCertFile, r.TLSKeyFile)
		if err != nil {
			return nil, &keyError{"redis.tls_cert_file", "and redis.tls_key_file are not a usable certificate and key (" +
				"check the files' PEM blocks and that the key matches)"}
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// keyError is a problem with one configuration key.
type keyError struct{ key, msg string }

func (e *keyError) Error() string { return e.key + ": " + e.msg }
