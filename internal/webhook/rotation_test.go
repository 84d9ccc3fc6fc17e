package webhook

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"smsgw/internal/queue"
)

// During a secret rotation (a destination with PreviousKey) every delivery
// carries two signatures, the current secret's first, then the previous
// one's: a receiver still on the old secret and one already on the new
// accept it alike (checked with the spec verifier, which knows nothing of
// Sign). Without PreviousKey, one signature.
func TestRotationSignsWithBothSecrets(t *testing.T) {
	newKey := []byte("fedcba9876543210fedcba9876543210")
	newSecret := "whsec_" + base64.StdEncoding.EncodeToString(newKey)
	type got struct {
		header http.Header
		body   []byte
	}
	var mu sync.Mutex
	byPath := map[string][]got{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		byPath[r.URL.Path] = append(byPath[r.URL.Path], got{r.Header.Clone(), body})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	f := start(t, nil, func(c *Config) {
		c.Resolve = func(e *queue.Event) (Destination, bool) {
			if e.Producer == "rotating" {
				return Destination{URL: srv.URL + "/rotating", Key: newKey, PreviousKey: testKey}, true
			}
			return Destination{URL: srv.URL + "/settled", Key: newKey}, true
		}
	})
	f.sent(t, "rotating", 3)
	f.sent(t, "settled", 1)
	waitFor(t, "every event delivered", func() bool { return f.stats(t).Backlog == 0 })

	mu.Lock()
	defer mu.Unlock()
	// one is the header with only the i-th signature of h.
	one := func(h http.Header, sig string) http.Header {
		h = h.Clone()
		h.Set(HeaderSignature, sig)
		return h
	}
	if len(byPath["/rotating"]) != 3 {
		t.Fatalf("%d deliveries to the rotating producer, want 3", len(byPath["/rotating"]))
	}
	for _, d := range byPath["/rotating"] {
		sigs := strings.Split(d.header.Get(HeaderSignature), " ")
		if len(sigs) != 2 {
			t.Fatalf("webhook-signature %q: %d signatures, want 2 (current, previous)", d.header.Get(HeaderSignature), len(sigs))
		}
		now := time.Now()
		for _, c := range []struct {
			what, secret, sig string
			ok                bool
		}{
			{"first with the new secret", newSecret, sigs[0], true},
			{"first with the old secret", testSecret, sigs[0], false},
			{"second with the old secret", testSecret, sigs[1], true},
			{"second with the new secret", newSecret, sigs[1], false},
			{"the header with the old secret", testSecret, d.header.Get(HeaderSignature), true},
			{"the header with the new secret", newSecret, d.header.Get(HeaderSignature), true},
		} {
			if err := specVerify(c.secret, one(d.header, c.sig), d.body, now); (err == nil) != c.ok {
				t.Errorf("%s: verified %v, want %v", c.what, err == nil, c.ok)
			}
		}
	}
	for _, d := range byPath["/settled"] {
		if sig := d.header.Get(HeaderSignature); strings.Contains(sig, " ") ||
			specVerify(newSecret, d.header, d.body, time.Now()) != nil {
			t.Errorf("without a previous key: webhook-signature %q, want one signature with the secret", sig)
		}
	}
}
