package admission

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"smsgw/internal/sms"
)

// referenceRequestHash is RequestHash as it was first written (each part
// written to the digest in turn): digests stored by earlier releases must
// still match.
func referenceRequestHash(m *sms.Message, ttl time.Duration) string {
	h := sha256.New()
	fields := []string{"v1", m.Class.String(), m.To, m.From, m.Body, m.Reference, strconv.FormatInt(int64(ttl/time.Second), 10)}
	if !m.SendAt.IsZero() {
		fields = append(fields, "send_at", m.SendAt.Format(time.RFC3339Nano))
	}
	if m.CallbackURL != "" {
		fields = append(fields, "callback_url", m.CallbackURL)
	}
	for _, f := range fields {
		h.Write([]byte(strconv.Itoa(len(f))))
		h.Write([]byte{':'})
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestRequestHashUnchanged(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	strs := []string{"", "+819012345678", "Shop", "héllo ✓", "12:34", "https://example.com/cb?x=1"}
	for range 2000 {
		m := &sms.Message{Class: sms.Class(rng.IntN(3)), To: strs[rng.IntN(len(strs))], From: strs[rng.IntN(len(strs))],
			Body: strs[rng.IntN(len(strs))], Reference: strs[rng.IntN(len(strs))]}
		if rng.IntN(2) == 0 {
			m.SendAt = time.Date(2026, 1, 2, 3, 4, 5, rng.IntN(1e9), time.UTC)
		}
		if rng.IntN(2) == 0 {
			m.CallbackURL = strs[rng.IntN(len(strs))]
		}
		ttl := time.Duration(rng.Int64N(1e6)) * time.Millisecond
		if got, want := RequestHash(m, ttl), referenceRequestHash(m, ttl); got != want {
			t.Fatalf("%+v ttl %v: %s, want %s", m, ttl, got, want)
		}
	}
}
