package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// An accepted message's stored first answer (a keyed POST /v1/messages)
// is kept in a compact form, not as its JSON: the id and the few fields
// the body is made of, space-separated,
//
//	<id> <status> <class> <segments> <encoding> <estimated_send_at, Unix ms> <send_at or -> <expires_at or ->
//
// (send_at and expires_at as the body writes them). A replay rebuilds
// the body (marshalAccepted) and the Location from it; the form is kept
// only when that rebuild gives the first answer's bytes exactly, checked
// when it is made, so a replay is byte for byte the first answer. About a
// third of the JSON's bytes, and no base64 of them (docs/operations.md,
// "What stays per message").

// acceptedForm is a's compact form, or "" when a is not an accepted
// message's answer the form rebuilds exactly (then the answer is kept as
// it is).
func acceptedForm(a *state.Answer) string {
	if a.Deflated || a.Form != "" || len(a.Body) == 0 || a.Body[0] != '{' {
		return ""
	}
	var m AcceptedMessage
	if err := json.Unmarshal(a.Body, &m); err != nil || m.EstimatedSendAt.Nanosecond()%int(time.Millisecond) != 0 {
		return ""
	}
	fields := []string{m.ID, string(m.Status), m.Class.String(), strconv.Itoa(m.Segments), m.Encoding,
		strconv.FormatInt(m.EstimatedSendAt.UnixMilli(), 10), formTime(m.SendAt), formTime(m.ExpiresAt)}
	for _, f := range fields {
		if f == "" || strings.ContainsAny(f, " ") || !state.PlainJSON(f) {
			return ""
		}
	}
	form := strings.Join(fields, " ")
	body, loc, err := fromForm(form)
	if err != nil || !bytes.Equal(body, a.Body) || loc != a.Location {
		return ""
	}
	return form
}

// formTime is t as the form keeps it: "-" for none.
func formTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339Nano)
}

// errBadForm: a stored compact form that does not parse.
var errBadForm = errors.New("stored answer: bad compact form")

// fromForm rebuilds an accepted message's body and Location from its form.
func fromForm(form string) (body []byte, loc string, err error) {
	f := strings.Split(form, " ")
	if len(f) != 8 {
		return nil, "", errBadForm
	}
	seg, err1 := strconv.Atoi(f[3])
	ms, err2 := strconv.ParseInt(f[5], 10, 64)
	cls, err3 := sms.ParseClass(f[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return nil, "", errBadForm
	}
	m := AcceptedMessage{ID: f[0], Status: sms.Status(f[1]), Class: cls, Segments: seg, Encoding: f[4],
		EstimatedSendAt: time.UnixMilli(ms).UTC()}
	for i, dst := range []**time.Time{&m.SendAt, &m.ExpiresAt} {
		if s := f[6+i]; s != "-" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return nil, "", errBadForm
			}
			*dst = &t
		}
	}
	body, err = marshalAccepted(&m)
	return body, location(m.ID), err
}

// compactForm is a with its accepted message's body in the compact form,
// when it rebuilds exactly; a itself otherwise.
func compactForm(a *state.Answer) *state.Answer {
	form := acceptedForm(a)
	if form == "" {
		return a
	}
	c := *a
	c.Body, c.Location, c.Form = nil, "", form
	return &c
}

// expandForm is a with the body and Location its form rebuilds; a itself
// when it has no form.
func expandForm(a *state.Answer) (*state.Answer, error) {
	if a.Form == "" {
		return a, nil
	}
	body, loc, err := fromForm(a.Form)
	if err != nil {
		return nil, err
	}
	c := *a
	c.Body, c.Location, c.Form = body, loc, ""
	return &c, nil
}
