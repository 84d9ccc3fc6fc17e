package twilio

import "fmt"

// codeText is the fixed text the gateway keeps for each Twilio error code
// it knows (twilio.com/docs/api/errors). The vendor's own message is never
// kept: it may quote the number or the body, whole, cut or re-encoded, and
// no scrub can find every such echo. An error is the code and this text.
var codeText = map[int]string{
	codeAccountDisabled:  "account is not active",
	20003:                "authentication failed",
	codeAccountInactive:  "account is not active",
	codeNotFound:         "account or resource not found",
	codeTooManyRequests:  "too many requests",
	codeInvalidFrom:      "invalid From number",
	21211:                "invalid To number",
	21408:                "sending to this region is not enabled",
	21602:                "message body is required",
	21603:                "a From number or messaging service is required",
	21604:                "a To number is required",
	codeFromNotCapable:   "From is not a message-capable number of this account",
	codeUnsubscribed:     "the recipient has unsubscribed",
	codeQueueFull:        "the queue of this From is full",
	codeBadCallback:      "the StatusCallback URL is not valid",
	codeFromNotTwilio:    "From is not a Twilio number, or a short code of another country",
	codeFromOtherAccount: "From belongs to another account",
	codeFromNotSMS:       "From is not SMS-capable",
	21612:                "the To number cannot be reached by SMS",
	21614:                "the To number is not a mobile number",
	21617:                "the message body is too long",
}

// unknownCodeText is the text of a code not in codeText.
const unknownCodeText = "error code not known to the gateway"

// codeMessage is an error's kept text: the code and its fixed text. Code 0
// (no Twilio error body) is "": the status's own text is used.
func codeMessage(code int) string {
	if code == 0 {
		return ""
	}
	text, ok := codeText[code]
	if !ok {
		text = unknownCodeText
	}
	return fmt.Sprintf("twilio %d: %s", code, text)
}
