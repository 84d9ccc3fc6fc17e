package twilio

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"smsgw/internal/provider"
	"smsgw/internal/provider/httpprov"
)

// inboundNames are the parameters Twilio documents for its request to the
// incoming-message webhook ("Twilio's request to your incoming message
// Webhook URL", twilio.com/docs/messaging/guides/webhook-request): the
// message's ids and status, the sender and recipient with their
// geographic fields, media, the opt-out type, and the WhatsApp and RCS
// additions. MediaUrlN and MediaContentTypeN are numbered (mediaName).
// Any other name, or any name given twice, is refused: X-Twilio-Signature
// joins names and values without a separator, so a captured request can
// otherwise be re-cut into other parameters under the same signature.
var inboundNames = map[string]bool{
	"MessageSid": true, "SmsSid": true, "SmsMessageSid": true, "AccountSid": true, "MessagingServiceSid": true,
	"From": true, "To": true, "Body": true, "NumMedia": true, "NumSegments": true, "ApiVersion": true,
	"SmsStatus": true, "MessageStatus": true, "MessageType": true, "OptOutType": true,
	"FromCity": true, "FromState": true, "FromZip": true, "FromCountry": true,
	"ToCity": true, "ToState": true, "ToZip": true, "ToCountry": true,
	"AddOns": true, "ChannelMetadata": true, "ChannelToAddress": true, "ChannelInstallSid": true, "ChannelPrefix": true,
	"ProfileName": true, "WaId": true, "Forwarded": true, "FrequentlyForwarded": true,
	"ButtonText": true, "ButtonPayload": true, "ButtonType": true,
	"Latitude": true, "Longitude": true, "Address": true, "Label": true,
	"OriginalRepliedMessageSender": true, "OriginalRepliedMessageSid": true,
	"ReferralBody": true, "ReferralHeadline": true, "ReferralSourceId": true, "ReferralSourceType": true,
	"ReferralSourceUrl": true, "ReferralMediaId": true, "ReferralMediaContentType": true, "ReferralMediaUrl": true,
	"ReferralNumMedia": true, "ReferralCtwaClid": true,
}

// mediaName matches the numbered media parameters (MediaUrl0,
// MediaContentType0, ...; Twilio sends up to ten).
var mediaName = regexp.MustCompile(`^(MediaUrl|MediaContentType)[0-9]{1,2}$`)

// messageSID is the format of an SMS or MMS Message resource's sid.
var messageSID = regexp.MustCompile(`^(SM|MM)[0-9a-f]{32}$`)

func knownInbound(name string) bool { return inboundNames[name] || mediaName.MatchString(name) }

// checkInbound checks a signed incoming message's form: Twilio's names,
// each once; this account's AccountSid; a MessageSid in Twilio's format,
// with SmsSid and SmsMessageSid (when given) the same.
func (p *Provider) checkInbound(form url.Values) (string, error) {
	if err := provider.CheckFormNames(form, knownInbound); err != nil {
		return "", err
	}
	if form.Get("AccountSid") != p.cfg.AccountSID {
		return "", &provider.ReceiptError{Field: "AccountSid", Reason: "not this gateway's account (provider.twilio.account_sid)"}
	}
	sid := form.Get("MessageSid")
	if sid == "" {
		sid = form.Get("SmsSid")
	}
	if !messageSID.MatchString(sid) {
		return "", &provider.ReceiptError{Field: "MessageSid", Reason: "missing, or not SM or MM and 32 hex digits"}
	}
	for _, k := range []string{"SmsSid", "SmsMessageSid"} {
		if v := form.Get(k); v != "" && v != sid {
			return "", &provider.ReceiptError{Field: k, Reason: "differs from MessageSid"}
		}
	}
	return sid, nil
}

// confirmTimeout bounds the question to Twilio's API about one incoming
// message: it is asked while Twilio waits for our answer (15 s).
const confirmTimeout = 5 * time.Second

// inboundRecord is the part of the Message resource ConfirmInbound reads.
type inboundRecord struct {
	SID         string `json:"sid"`
	AccountSID  string `json:"account_sid"`
	From        string `json:"from"`
	Body        string `json:"body"`
	Direction   string `json:"direction"`
	DateCreated string `json:"date_created"`
	DateSent    string `json:"date_sent"`
}

var _ provider.InboundConfirmer = (*Provider)(nil)

// ConfirmInbound implements provider.InboundConfirmer: it reads the
// Message resource of in's sid (GET
// /2010-04-01/Accounts/{AccountSid}/Messages/{sid}.json, with the
// adapter's credentials and client) and confirms it only when it is an
// inbound message of this account from in.From saying in.Text. The time
// returned is when Twilio received it (date_sent: when Twilio posted it to
// the webhook; else date_created). 404 or any difference:
// provider.ErrInboundNotConfirmed; no answer, 429 or 5xx:
// provider.ErrConfirmUnavailable.
func (p *Provider) ConfirmInbound(ctx context.Context, in provider.Inbound) (time.Time, error) {
	if !messageSID.MatchString(in.ProviderID) {
		return time.Time{}, provider.ErrInboundNotConfirmed
	}
	ctx, cancel := httpprov.WithTimeout(ctx, min(p.cfg.Timeout, confirmTimeout))
	defer cancel()
	u := strings.TrimSuffix(p.send.Endpoint, ".json") + "/" + in.ProviderID + ".json"
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, u, http.NoBody)
	if err != nil {
		return time.Time{}, errors.Join(provider.ErrConfirmUnavailable, err)
	}
	hreq.Header.Set("Accept", "application/json")
	p.send.Authorize(hreq)
	resp, err := p.send.Client.Do(hreq) //nolint:bodyclose // ReadBody closes it, on every path
	if err != nil {
		return time.Time{}, errors.Join(provider.ErrConfirmUnavailable, httpprov.TransportError(ctx, err))
	}
	body, rerr := httpprov.ReadBody(resp)
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return time.Time{}, provider.ErrInboundNotConfirmed
	case resp.StatusCode != http.StatusOK || rerr != nil:
		return time.Time{}, errors.Join(provider.ErrConfirmUnavailable, httpprov.BadResponse(resp.StatusCode, "message resource"))
	}
	var m inboundRecord
	if err := json.Unmarshal(body, &m); err != nil {
		return time.Time{}, errors.Join(provider.ErrConfirmUnavailable, httpprov.BadResponse(resp.StatusCode, "decode message resource"))
	}
	if m.SID != in.ProviderID || m.AccountSID != p.cfg.AccountSID || m.Direction != "inbound" ||
		m.From != in.From || m.Body != in.Text {
		return time.Time{}, provider.ErrInboundNotConfirmed
	}
	for _, d := range []string{m.DateSent, m.DateCreated} {
		if t, err := time.Parse(time.RFC1123Z, d); err == nil {
			return t, nil
		}
	}
	return time.Time{}, provider.ErrInboundNotConfirmed
}
