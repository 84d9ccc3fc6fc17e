package vonage

import (
	"net/http"
	"strconv"
)

// statusText is the fixed text the gateway keeps for each SMS API status
// it knows (developer.vonage.com/api-errors/sms). The vendor's error-text
// is never kept: it may quote the number or the body, whole, cut or
// re-encoded, and no scrub can find every such echo. A refusal is the
// status and this text.
var statusText = map[string]string{
	"1":  "throttled",
	"2":  "missing parameters",
	"3":  "invalid parameters",
	"4":  "invalid credentials",
	"5":  "internal error",
	"6":  "invalid message",
	"7":  "number barred",
	"8":  "partner account barred",
	"9":  "partner quota violation",
	"10": "too many existing binds",
	"11": "account not enabled for HTTP",
	"12": "message too long",
	"14": "invalid signature",
	"15": "invalid sender address",
	"22": "invalid network code",
	"23": "invalid callback url",
	"29": "non-whitelisted destination",
	"32": "signature and api secret disallowed",
	"33": "number de-activated",
}

// unknownText is the text of a status or error code not known here.
const unknownText = "code not known to the gateway"

// statusMessage is the kept text of a refused part: its status (when it is
// a short number; anything else is not echoed) and the status's fixed text.
func statusMessage(status string) string {
	if text, ok := statusText[status]; ok {
		return "vonage status " + status + ": " + text
	}
	if n, err := strconv.Atoi(status); err == nil && n >= 0 && n < 1000 {
		return "vonage status " + status + ": " + unknownText
	}
	return "vonage status: " + unknownText
}

// errorCodeMessage is the kept text of a request-level error-code: the
// code, when it is an HTTP-like status, with that status's text; the
// vendor's label is never kept.
func errorCodeMessage(code int, ok bool) string {
	if ok {
		if text := http.StatusText(code); text != "" {
			return "vonage error-code " + strconv.Itoa(code) + ": " + text
		}
		return "vonage error-code " + strconv.Itoa(code) + ": " + unknownText
	}
	return "vonage error-code: " + unknownText
}
