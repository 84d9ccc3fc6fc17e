package vonage

import (
	"crypto/hmac"
	"crypto/md5"  //nolint:gosec // Vonage's signing methods include MD5; we only check them
	"crypto/sha1" //nolint:gosec // likewise SHA-1 HMAC
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"hash"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/sms"
)

// Signature methods of Vonage's signed webhooks (provider.vonage.signature_method).
const (
	MethodMD5Hash = "md5hash" // MD5 of the string with the secret appended; Vonage's default
	MethodMD5     = "md5"     // HMAC-MD5
	MethodSHA1    = "sha1"    // HMAC-SHA1
	MethodSHA256  = "sha256"  // HMAC-SHA256
	MethodSHA512  = "sha512"  // HMAC-SHA512
)

// Methods lists the signature methods.
var Methods = []string{MethodMD5Hash, MethodMD5, MethodSHA1, MethodSHA256, MethodSHA512}

// Signature is the sig of a signed webhook's parameters as Vonage documents
// it: every parameter but sig, sorted by name, each as "&name=value" with
// every '&' and '=' in the value replaced by '_', concatenated; md5hash is
// the hex MD5 of that string followed by the signature secret, the others
// the hex HMAC of the string keyed with the secret. Hex is compared without
// regard to case.
func Signature(method, secret string, params map[string]string) string {
	names := make([]string, 0, len(params))
	for k := range params {
		if k != "sig" {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	clean := strings.NewReplacer("&", "_", "=", "_")
	for _, k := range names {
		b.WriteString("&")
		b.WriteString(k)
		b.WriteString("=")
		b.WriteString(clean.Replace(params[k]))
	}
	var h hash.Hash
	switch method {
	case MethodMD5Hash, "":
		sum := md5.Sum([]byte(b.String() + secret)) //nolint:gosec // Vonage's method
		return hex.EncodeToString(sum[:])
	case MethodMD5:
		h = hmac.New(md5.New, []byte(secret))
	case MethodSHA1:
		h = hmac.New(sha1.New, []byte(secret))
	case MethodSHA256:
		h = hmac.New(sha256.New, []byte(secret))
	case MethodSHA512:
		h = hmac.New(sha512.New, []byte(secret))
	default:
		return ""
	}
	h.Write([]byte(b.String()))
	return hex.EncodeToString(h.Sum(nil))
}

// errOptedOut is the DLR err-code of a message blocked because its
// recipient opted out of the sender's messages: "9 Illegal Number: user
// has requested not to receive messages from a specific service" (Vonage
// API Support, "Vonage SMS Delivery Error Codes and Descriptions"), which
// Vonage's Opt-Out Assist guide gives as the SMS API's answer to a send
// to an opted-out number: status 0 at send, then a DLR with status failed
// or rejected and err-code 9 ("Messaging Opted-out Numbers",
// developer.vonage.com/en/opt-out-assist/guides/messaging-opted-out-numbers).
// The DLR's msisdn is the recipient.
const errOptedOut = "9"

// temporaryCodes are the DLR err-codes Vonage's table ("Vonage SMS
// Delivery Error Codes and Descriptions") ends with "Retry": 2 (absent
// subscriber, temporary), 7 (handset busy), 8 (network error). The same
// page says neither Vonage nor the operators try again unless another API
// call is made, so the message is undelivered like any failed DLR: the
// gateway does not send a message the provider took a second time (that
// would be a new message, charged again, whose timing is the producer's
// call). Its error code says the failure was temporary, so that the
// producer can decide (last_error, the undelivered callback's error).
var temporaryCodes = map[string]string{"2": "absent subscriber", "7": "handset busy", "8": "network error"}

// errorCode is a DLR's err-code as the message's error: the code, and for
// a temporary failure what it was and that a new send may be delivered.
func errorCode(code string) string {
	if what, ok := temporaryCodes[code]; ok {
		return code + " (temporary: " + what + "; not resent, a new send may be delivered)"
	}
	return code
}

// dlrStatuses maps the DLR statuses that end a message; accepted,
// buffered and unknown change nothing. expired (the handset stayed off
// past the validity) and failed (the carrier could not deliver) are
// undelivered; rejected (refused before delivery was tried) is failed.
var dlrStatuses = map[string]sms.Status{
	"delivered": sms.StatusDelivered, "expired": sms.StatusUndelivered,
	"failed": sms.StatusUndelivered, "rejected": sms.StatusFailed,
}

// params reads a DLR's parameters: a form POST or a JSON POST of strings.
func params(r *http.Request, raw []byte) (map[string]string, bool) {
	out := map[string]string{}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "application/json" {
		var m map[string]any
		if json.Unmarshal(raw, &m) != nil {
			return nil, false
		}
		for k, v := range m {
			s, ok := v.(string)
			if !ok {
				b, _ := json.Marshal(v)
				s = string(b)
			}
			out[k] = s
		}
		return out, true
	}
	form, err := url.ParseQuery(string(raw))
	if err != nil {
		return nil, false
	}
	for k, vs := range form {
		out[k] = vs[0]
	}
	return out, true
}

// verified reads a signed webhook's parameters (a form or a JSON POST; a
// delivery receipt or an inbound message alike) and checks them as Vonage
// signs them: sig over every other parameter with signature_secret
// (Signature), and the signed timestamp within
// provider.ReceiptMaxAge/ReceiptMaxAhead of our clock. The SMS API signs
// its webhooks with sig only; the JWT in an Authorization header is the
// Messages, Dispatch and Voice APIs' scheme, which this adapter does not
// send through, so it is not accepted.
//
// Refused like a wrong signature (provider.ErrBadSignature): a parameter
// name holding '&' or '=' (the signed string joins "&name=value" with only
// the values cleaned, so such a name could re-cut a captured webhook's
// parameters into others under the same sig; Vonage's names never hold
// them), and a webhook whose signed timestamp is missing or outside the
// window (provider.ErrStaleReceipt), so a captured one cannot be replayed
// later.
func (p *Provider) verified(r *http.Request, raw []byte) (map[string]string, error) {
	ps, ok := params(r, raw)
	if !ok || p.cfg.SignatureSecret == "" || ps["sig"] == "" || !plainNames(ps) ||
		!hmac.Equal([]byte(strings.ToLower(ps["sig"])), []byte(Signature(p.cfg.SignatureMethod, p.cfg.SignatureSecret, ps))) {
		return nil, provider.ErrBadSignature
	}
	if err := provider.CheckReceiptTime(signedAt(ps["timestamp"]), p.now()); err != nil {
		return nil, err
	}
	return ps, nil
}

// ParseReceipt implements provider.ReceiptParser for Vonage's SMS API
// delivery receipt (messageId, status, err-code, client-ref, ...), a
// signed webhook (verified).
func (p *Provider) ParseReceipt(r *http.Request, raw []byte) (provider.Receipt, error) {
	ps, err := p.verified(r, raw)
	if err != nil {
		return provider.Receipt{}, err
	}
	id := ps["messageId"]
	if id == "" {
		return provider.Receipt{}, &provider.ReceiptError{Field: "messageId", Reason: "missing"}
	}
	word := ps["status"]
	vendor := word
	if _, known := dlrStatuses[word]; !known {
		vendor = "other"
	}
	code := ps["err-code"]
	if code == "0" {
		code = ""
	}
	rc := provider.Receipt{ProviderID: id, Reference: ps["client-ref"], Status: dlrStatuses[word],
		VendorStatus: vendor, ErrorCode: errorCode(code)}
	if code == errOptedOut && rc.Status != "" && ps["msisdn"] != "" {
		rc.OptedOut, rc.Recipient = true, "+"+strings.TrimPrefix(ps["msisdn"], "+")
	}
	return rc, nil
}

// plainNames reports whether no parameter name holds '&' or '=', the
// separators of the signed string.
func plainNames(ps map[string]string) bool {
	for k := range ps {
		if strings.ContainsAny(k, "&=") {
			return false
		}
	}
	return true
}

// signedAt reads a signed webhook's timestamp (whole seconds since the
// epoch, UTC); the zero time when it is missing or not a positive integer.
func signedAt(s string) time.Time {
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec <= 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0)
}
