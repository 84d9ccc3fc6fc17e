package vonage_test

import (
	"crypto/hmac"
	"crypto/md5" //nolint:gosec // the vendor's method
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"smsgw/internal/provider"
	"smsgw/internal/provider/vonage"
	"smsgw/internal/sms"
)

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

func TestParseReceipt(t *testing.T) {
	for _, method := range vonage.Methods {
		t.Run(method, func(t *testing.T) {
			p, err := vonage.New(vonage.Config{Settings: vonage.Settings{APIKey: "k", APISecret: "s", From: "ACME",
				SignatureSecret: "sig-secret", SignatureMethod: method}})
			if err != nil {
				t.Fatal(err)
			}
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
