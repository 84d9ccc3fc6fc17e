package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"smsgw/internal/queue/embedded"
	"smsgw/internal/sms"
)

const minimalConfig = `provider: {url: "http://127.0.0.1:9100/send"}
producers:
  - {name: app, key: "app-key-0123456789ab", classes: [transactional], rate: 100, burst: 200}
`

// compact-store compacts the store named by --path or by a
// configuration's store.path, refuses a Redis configuration and a store in
// use, and says what it did.
func TestCompactStoreCommand(t *testing.T) {
	dir := t.TempDir()
	q, err := embedded.Open(embedded.Config{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Enqueue(t.Context(), &sms.Message{ID: sms.NewID(time.Now()), Producer: "p", Class: sms.ClassTransactional,
		To: "+819012345678", Body: "hello", Segments: 1}); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"compact-store", "--path", dir, "--lock-timeout", "100ms"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "in use") {
		t.Errorf("store in use: exit %d, stderr %q; want 1 saying it is in use", code, errb.String())
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "smsgw.yaml")
	if err := os.WriteFile(cfg, []byte("store: {path: "+dir+"}\n"+minimalConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"compact-store", "--config", cfg}, &out, &errb); code != 0 || !strings.Contains(out.String(), "MiB") {
		t.Errorf("compact-store --config: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if err := os.WriteFile(cfg, []byte("redis: {addr: \"127.0.0.1:6379\"}\n"+minimalConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := run([]string{"compact-store", "--config", cfg}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "Redis") {
		t.Errorf("Redis config: exit %d, stderr %q; want 2 naming Redis", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"compact-store"}, &out, &errb); code != 2 {
		t.Errorf("no flags: exit %d, stderr %q; want 2", code, errb.String())
	}
}
