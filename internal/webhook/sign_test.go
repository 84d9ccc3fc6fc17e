package webhook

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// The test vector published with the Standard Webhooks spec's reference
// libraries: secret, id, timestamp and body, and the signature they give.
func TestSignMatchesTheSpecVector(t *testing.T) {
	key, err := base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

func TestVerify(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"type":"message.sent"}`)
	sig := Sign(key, "evt_1", now, body)
	ts := "1700000000"
	if err := Verify(key, "evt_1", ts, "v1,AAAA "+sig, body, now.Add(time.Minute), 5*time.Minute); err != nil {
		t.Fatalf("Verify of a good delivery: %v", err)
	}
	for name, tc := range map[string]struct {
		id, ts, sig string
		body        []byte
		now         time.Time
		want        error
	}{
		"other body":    {"evt_1", ts, sig, []byte(`{"type":"message.failed"}`), now, ErrSignature},
		"other id":      {"evt_2", ts, sig, body, now, ErrSignature},
		"old timestamp": {"evt_1", ts, sig, body, now.Add(6 * time.Minute), ErrTimestamp},
		"no signature":  {"evt_1", ts, "", body, now, ErrMissingHeader},
		"v2 only":       {"evt_1", ts, "v2," + strings.TrimPrefix(sig, "v1,"), body, now, ErrSignature},
	} {
		if err := Verify(key, tc.id, tc.ts, tc.sig, tc.body, tc.now, 5*time.Minute); !errors.Is(err, tc.want) {
			t.Errorf("%s: Verify = %v, want %v", name, err, tc.want)
		}
	}
}

// The body is the same bytes for the same event and carries nothing of the
// recipient or the text.
func TestBodyIsStableAndCarriesNoPersonalData(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	e := &queue.Event{ID: "evt_1", MessageID: "msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA", Producer: "notify", Status: sms.StatusFailed,
		Reference: "order-17", Class: sms.ClassMarketing, Segments: 2, ErrorCode: queue.EventErrorRejected,
		ErrorReason: "provider refused: invalid number", At: at, Attempts: 3, LastError: "HTTP 500",
		CallbackURL: "https://a.example/cb?token=secret"}
	a, err := Body(e)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Body(e)
	if string(a) != string(b) {
		t.Fatal("two bodies of one event differ")
	}
	want := `{"type":"message.failed","timestamp":"2026-01-02T03:04:05.006Z","data":{"id":"msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA",` +
		`"reference":"order-17","status":"failed","class":"marketing","segments":2,"provider_message_id":"",` +
		`"error":{"code":"rejected","message":"provider refused: invalid number"},"at":"2026-01-02T03:04:05.006Z"}}`
	if string(a) != want {
		t.Fatalf("body\n %s\nwant\n %s", a, want)
	}
	for _, leak := range []string{"token", "notify", "HTTP 500", "+81"} {
		if strings.Contains(string(a), leak) {
			t.Errorf("body carries %q", leak)
		}
	}
}

// An empty key signs nothing: anyone can compute HMAC with it, so Verify
// refuses it as the spec's reference libraries refuse an empty secret.
func TestVerifyRefusesAnEmptyKey(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{}`)
	for _, key := range [][]byte{nil, {}} {
		sig := Sign(key, "evt_1", now, body)
		if err := Verify(key, "evt_1", "1700000000", sig, body, now, 5*time.Minute); err == nil {
			t.Errorf("Verify with a %d-byte key accepted a signature", len(key))
		}
	}
}
