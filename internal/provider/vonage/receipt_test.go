package vonage_test

import (
	"crypto/hmac"
	"crypto/md5" //nolint:gosec // the vendor's method
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/provider/vonage"
	"smsgw/internal/sms"
)

// signedWith is the adapter whose webhooks are signed with the secret
// "sig-secret" by method (empty: Vonage's default), its clock now.
func signedWith(t *testing.T, method string, now func() time.Time) *vonage.Provider {
	t.Helper()
	p, err := vonage.New(vonage.Config{Settings: vonage.Settings{APIKey: "k", APISecret: "s", From: "ACME",
		SignatureSecret: "sig-secret", SignatureMethod: method}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.CloseIdleConnections)
	return p
}

// TestSignatureString: the signed string, written out by hand from the
// documented rule (sorted, "&k=v", '&' and '=' in values as '_').
func TestSignatureString(t *testing.T) {
	params := map[string]string{"status": "delivered", "messageId": "0A1", "client-ref": "a=b&c", "timestamp": "1700000000", "sig": "x"}
	s := "&client-ref=a_b_c&messageId=0A1&status=delivered&timestamp=1700000000"
	sum := md5.Sum([]byte(s + "secret")) //nolint:gosec // the vendor's method
	if got := vonage.Signature(vonage.MethodMD5Hash, "secret", params); got != hex.EncodeToString(sum[:]) {
		t.Errorf("md5hash %s", got)
	}
	mac := hmac.New(sha256.New, []byte("secret"))
	mac.Write([]byte(s))
	if got := vonage.Signature(vonage.MethodSHA256, "secret", params); got != hex.EncodeToString(mac.Sum(nil)) {
		t.Errorf("sha256 %s", got)
	}
}

// signedAt is the timestamp the test receipts are signed with.
var signedAt = time.Unix(1700000000, 0)

func TestParseReceipt(t *testing.T) {
	for _, method := range vonage.Methods {
		t.Run(method, func(t *testing.T) {
			p := signedWith(t, method, func() time.Time { return signedAt.Add(3 * time.Second) })
			ps := map[string]string{"messageId": "0B00000012345678", "status": "expired", "err-code": "27",
				"client-ref": "msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA", "msisdn": "447700900000", "timestamp": "1700000000", "nonce": "n1"}
			form := func(sig string) string {
				v := url.Values{}
				for k, s := range ps {
					v.Set(k, s)
				}
				if sig != "" {
					v.Set("sig", sig)
				}
				return v.Encode()
			}
			parse := func(body string) (provider.Receipt, error) {
				r := httptest.NewRequestWithContext(t.Context(), "POST", "/v1/receipts/vonage", strings.NewReader(body))
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				return p.ParseReceipt(r, []byte(body))
			}
			good := vonage.Signature(method, "sig-secret", ps)
			rc, err := parse(form(strings.ToUpper(good)))
			if err != nil {
				t.Fatal(err)
			}
			want := provider.Receipt{ProviderID: "0B00000012345678", Reference: "msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA",
				Status: sms.StatusUndelivered, VendorStatus: "expired", ErrorCode: "27"}
			if rc != want {
				t.Fatalf("receipt %+v, want %+v", rc, want)
			}
			if _, err := parse(form("")); !errors.Is(err, provider.ErrBadSignature) {
				t.Errorf("unsigned: %v", err)
			}
			ps["status"] = "delivered"
			if _, err := parse(form(good)); !errors.Is(err, provider.ErrBadSignature) {
				t.Errorf("tampered: %v", err)
			}
		})
	}
}

// receiptFor signs ps (with sig-secret, md5hash) and returns a parser whose
// clock reads now, and a parse of ps as a form POST, re-signed unless sig
// is given.
func receiptFor(t *testing.T, now time.Time) func(ps map[string]string) (provider.Receipt, error) {
	t.Helper()
	p := signedWith(t, "", func() time.Time { return now })
	return func(ps map[string]string) (provider.Receipt, error) {
		v := url.Values{}
		for k, s := range ps {
			v.Set(k, s)
		}
		if _, ok := ps["sig"]; !ok {
			v.Set("sig", vonage.Signature(vonage.MethodMD5Hash, "sig-secret", ps))
		}
		body := v.Encode()
		r := httptest.NewRequestWithContext(t.Context(), "POST", "/v1/receipts/vonage", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return p.ParseReceipt(r, []byte(body))
	}
}

// A correctly signed receipt is believed only within the window around its
// signed timestamp: an old one (a captured receipt replayed), one from too
// far ahead, and one with no usable timestamp are refused like a wrong
// signature.
func TestReceiptReplayWindow(t *testing.T) {
	now := time.Unix(1800000000, 0)
	parse := receiptFor(t, now)
	at := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }
	for _, tc := range []struct {
		name, ts string
		ok       bool
	}{
		{"now", at(0), true},
		{"oldest accepted", at(-provider.ReceiptMaxAge), true},
		{"a second too old", at(-provider.ReceiptMaxAge - time.Second), false},
		{"a day old", at(-24 * time.Hour), false},
		{"furthest ahead accepted", at(provider.ReceiptMaxAhead), true},
		{"a second too far ahead", at(provider.ReceiptMaxAhead + time.Second), false},
		{"far future", "9223372036854775807", false},
		{"zero", "0", false},
		{"negative", "-60", false},
		{"not a number", "soon", false},
		{"milliseconds", strconv.FormatInt(now.UnixMilli(), 10), false},
		{"missing", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := map[string]string{"messageId": "0B00000012345678", "status": "delivered", "err-code": "0",
				"client-ref": "msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA", "nonce": "n1"}
			if tc.ts != "" {
				ps["timestamp"] = tc.ts
			}
			rc, err := parse(ps)
			if tc.ok {
				if err != nil || rc.Status != sms.StatusDelivered {
					t.Fatalf("got %+v, %v; want it delivered", rc, err)
				}
				return
			}
			if !errors.Is(err, provider.ErrStaleReceipt) || !errors.Is(err, provider.ErrBadSignature) {
				t.Fatalf("got %+v, %v; want ErrStaleReceipt, which is an ErrBadSignature", rc, err)
			}
			if strings.Contains(err.Error(), tc.ts) && tc.ts != "" {
				t.Errorf("error %q echoes the timestamp", err)
			}
		})
	}
}

// The signed string joins "&name=value" cleaning only the values, so a
// name holding '=' and '&' can re-cut a captured receipt into other
// parameters under the same sig (here swallowing its err-code and
// client-ref). Such names are refused.
func TestReceiptNamesCannotRecut(t *testing.T) {
	now := time.Unix(1800000000, 0)
	parse := receiptFor(t, now)
	ts := strconv.FormatInt(now.Unix(), 10)
	captured := map[string]string{"client-ref": "msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA", "err-code": "27",
		"messageId": "0B00000012345678", "status": "expired", "timestamp": ts}
	sig := vonage.Signature(vonage.MethodMD5Hash, "sig-secret", captured)
	recut := map[string]string{"client-ref=msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA&err-code": "27",
		"messageId": "0B00000012345678", "status": "expired", "timestamp": ts, "sig": sig}
	if got := vonage.Signature(vonage.MethodMD5Hash, "sig-secret", recut); got != sig {
		t.Fatalf("the re-cut parameters sign differently (%s, %s): the test shows nothing", got, sig)
	}
	if rc, err := parse(recut); !errors.Is(err, provider.ErrBadSignature) {
		t.Fatalf("re-cut receipt: %+v, %v; want ErrBadSignature", rc, err)
	}
	if rc, err := parse(captured); err != nil || rc.ErrorCode != "27" || rc.Reference == "" {
		t.Fatalf("captured receipt: %+v, %v", rc, err)
	}
}

// A DLR with err-code 9 (the recipient opted out of the sender's
// messages, as Vonage's Opt-Out Assist guide answers a send to them) says
// so, with the recipient's number from msisdn; any other code does not.
func TestReceiptOptedOut(t *testing.T) {
	now := time.Unix(1800000000, 0)
	parse := receiptFor(t, now)
	ps := func(status, code string) map[string]string {
		return map[string]string{"messageId": "aaaaaaaa-bbbb-cccc-dddd-0123456789ab", "status": status, "err-code": code,
			"msisdn": "447700900000", "to": "AcmeInc", "client-ref": "msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA",
			"timestamp": strconv.FormatInt(now.Unix(), 10), "nonce": "n1"}
	}
	for _, status := range []string{"failed", "rejected"} {
		rc, err := parse(ps(status, "9"))
		if err != nil || !rc.OptedOut || rc.Recipient != "+447700900000" || rc.ErrorCode != "9" || rc.Status == "" {
			t.Errorf("%s, err-code 9: %+v, %v; want opted out, recipient +447700900000", status, rc, err)
		}
	}
	for _, code := range []string{"0", "6", "99"} {
		if rc, err := parse(ps("failed", code)); err != nil || rc.OptedOut || rc.Recipient != "" {
			t.Errorf("err-code %s: %+v, %v; want no opt-out", code, rc, err)
		}
	}
	// A status on the way changes nothing, err-code or not.
	if rc, err := parse(ps("buffered", "9")); err != nil || rc.OptedOut {
		t.Errorf("buffered: %+v, %v", rc, err)
	}
}

// err-codes 2, 7 and 8, which Vonage's table ends with "Retry", end the
// message undelivered like any failed DLR (neither Vonage nor the
// operators try again, and the gateway does not send it twice), with an
// error that says the failure was temporary; other codes are the code.
func TestReceiptTemporaryCodes(t *testing.T) {
	now := time.Unix(1800000000, 0)
	parse := receiptFor(t, now)
	ps := func(code string) map[string]string {
		return map[string]string{"messageId": "aaaaaaaa-bbbb-cccc-dddd-0123456789ab", "status": "failed", "err-code": code,
			"msisdn": "447700900000", "client-ref": "msg_01JD5ZQ8X2N4M7P9R3T6V8W0YA",
			"timestamp": strconv.FormatInt(now.Unix(), 10), "nonce": "n1"}
	}
	for code, what := range map[string]string{"2": "absent subscriber", "7": "handset busy", "8": "network error"} {
		rc, err := parse(ps(code))
		if err != nil || rc.Status != sms.StatusUndelivered ||
			rc.ErrorCode != code+" (temporary: "+what+"; not resent, a new send may be delivered)" {
			t.Errorf("err-code %s: %+v, %v; want undelivered, a temporary %s", code, rc, err, what)
		}
	}
	for _, code := range []string{"1", "3", "6", "99"} {
		if rc, err := parse(ps(code)); err != nil || rc.Status != sms.StatusUndelivered || rc.ErrorCode != code {
			t.Errorf("err-code %s: %+v, %v; want undelivered with the code", code, rc, err)
		}
	}
}
