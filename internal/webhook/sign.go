// Package webhook delivers status events to producers as Standard Webhooks:
// the signature (this file), the event body (payload.go), an HTTP client that
// refuses private destinations at connect time (client.go) and the delivery
// loop over the queue's outbox (deliver.go).
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Header names of the Standard Webhooks spec.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Sign is the webhook-signature value of one delivery: "v1," and the
// base64 of HMAC-SHA256(key, "{id}.{timestamp}.{body}"), timestamp in Unix
// seconds. key is the secret's bytes (after "whsec_", base64-decoded).
func Sign(key []byte, id string, ts time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(key, id, strconv.FormatInt(ts.Unix(), 10), body))
}

// Signatures is the webhook-signature value of one delivery to dest: the
// signature with dest.Key, then, during a rotation, the one with
// dest.PreviousKey, space-separated (the spec's list), so that a receiver
// that knows either secret accepts it.
func Signatures(dest Destination, id string, ts time.Time, body []byte) string {
	sig := Sign(dest.Key, id, ts, body)
	if len(dest.PreviousKey) > 0 && !hmac.Equal(dest.PreviousKey, dest.Key) {
		sig += " " + Sign(dest.PreviousKey, id, ts, body)
	}
	return sig
}

func mac(key []byte, id, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Errors of Verify.
var (
	ErrMissingHeader = errors.New("webhook: missing webhook-id, webhook-timestamp or webhook-signature")
	ErrTimestamp     = errors.New("webhook: timestamp outside the tolerance")
	ErrSignature     = errors.New("webhook: no matching signature")
	ErrEmptyKey      = errors.New("webhook: empty key")
)

// Verify checks a received delivery the way a producer should: the
// timestamp within tolerance of now (replays of old deliveries fail), and
// one of the space-separated "v1,<base64>" signatures matching, compared in
// constant time. It is what docs/callbacks.md shows producers. An empty
// key verifies nothing (anyone can sign with it).
func Verify(key []byte, id, timestamp, signatures string, body []byte, now time.Time, tolerance time.Duration) error {
	if len(key) == 0 {
		return ErrEmptyKey
	}
	if id == "" || timestamp == "" || signatures == "" {
		return ErrMissingHeader
	}
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return ErrTimestamp
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrTimestamp
	}
	want := mac(key, id, timestamp, body)
	for _, s := range strings.Fields(signatures) {
		v, sig, ok := strings.Cut(s, ",")
		if !ok || v != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrSignature
}
