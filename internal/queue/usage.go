package queue

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"smsgw/internal/sms"
)

// Usage: what each producer accepted and how its messages ended, per day.
// Both backends count it in the same atomic step as the transition it
// counts, so that a replayed or retried call, which changes nothing, counts
// nothing either:
//
//   - the enqueue that stores a message (not one that finds it stored)
//     counts it "accepted", and RecordSent (the OTP fast path) counts its
//     message accepted and sent;
//   - the transition that ends it in the queue counts its final status:
//     Complete (sent, failed, expired, suppressed), a take that ends it
//     suppressed, Cancel (canceled), Dead (failed); RetryDead takes the
//     failed back, since the dead letter is queued again.
//
// A delivery receipt does not move it: usage says how the queue ended a
// message (a sent one was charged, whatever its receipt says later).
//
// Counts are kept per producer and per UTC day of the message's creation
// (its id's time), by class, status and destination country, in messages
// and units (max(Segments, 1): what the provider charges). The day's counts
// expire UsageTTL after their last change: a read covers the retention.

// UsageAccepted is the Status of UsageRow that counts accepted messages.
const UsageAccepted = "accepted"

// UsageUnknownCountry is the country of a number whose region is unknown.
const UsageUnknownCountry = "unknown"

// usageAcceptedCode is accepted's code in a usage field (no status code is "a").
const usageAcceptedCode = "a"

// UsageDayLayout is how a usage day is written (UTC).
const UsageDayLayout = "2006-01-02"

// UsageRow is one counter: a producer's messages created on Day, of
// Class, to Country, with Status.
type UsageRow struct {
	Day      string // UsageDayLayout
	Producer string
	Class    sms.Class
	Country  string // ISO 3166-1 alpha-2, "001" (non-geographic), or UsageUnknownCountry
	Status   string // UsageAccepted, or the final status word the queue ended the messages with
	Messages int64
	Units    int64
}

// UsageReader is implemented by every backend.
type UsageReader interface {
	// Usage returns the non-zero counters of producers for the days from
	// to to (UTC dates, both included), ordered by day, producer, class,
	// country and status.
	Usage(ctx context.Context, producers []string, from, to time.Time) ([]UsageRow, error)
}

// UsageCount is what one transition adds to a producer's usage: its day,
// its field (class, status and country) and its units.
type UsageCount struct {
	Day   string // UsageDayLayout, the message's creation day (UTC)
	Field string // "<class digit>:<status code, or a for accepted>:<country>"
	Units int64
}

// UsageTTL is how long a day's counters stay after their last change:
// the retention, a day for the day itself, and a day of margin.
func UsageTTL(retention time.Duration) time.Duration { return retention + 48*time.Hour }

// UsageOf is the count of message m (live: its full number) for status
// st, or for acceptance when st is "". ok is false for a malformed id.
func UsageOf(m *sms.Message, st sms.Status) (UsageCount, bool) {
	created, ok := sms.IDTime(m.ID)
	if !ok {
		return UsageCount{}, false
	}
	code := usageAcceptedCode
	if st != "" {
		c, err := StatusCode(st)
		if err != nil {
			return UsageCount{}, false
		}
		code = c
	}
	return UsageCount{
		Day:   created.UTC().Format(UsageDayLayout),
		Field: classDigit(m.Class) + ":" + code + ":" + UsageCountry(m.To),
		Units: int64(max(m.Segments, 1)),
	}, true
}

// UsageCountry is the destination country of an E.164 number: its ISO
// region, "001" for a non-geographic network, else UsageUnknownCountry —
// a closed set.
func UsageCountry(e164 string) string {
	// DestinationOf names only the regions of its compiled calling codes
	// (or none): a closed set, read without loading more metadata.
	if r := sms.DestinationOf(e164).Region; r != "" {
		return r
	}
	return UsageUnknownCountry
}

// ParseUsageField reads a usage field (UsageCount.Field) into a row's
// class, country and status.
func ParseUsageField(f string) (UsageRow, error) {
	parts := strings.SplitN(f, ":", 3)
	if len(parts) != 3 {
		return UsageRow{}, fmt.Errorf("usage field %q", f)
	}
	class, ok := digitClass[parts[0]]
	if !ok {
		return UsageRow{}, fmt.Errorf("usage field %q: class", f)
	}
	status := UsageAccepted
	if parts[1] != usageAcceptedCode {
		st, ok := CodeStatus(parts[1])
		if !ok {
			return UsageRow{}, fmt.Errorf("usage field %q: status", f)
		}
		status = string(st)
	}
	return UsageRow{Class: class, Status: status, Country: parts[2]}, nil
}

// UsageDays are the days from to to (UTC dates, both included), oldest
// first; none when to is before from.
func UsageDays(from, to time.Time) []string {
	from, to = UsageDay(from), UsageDay(to)
	var out []string
	for d := from; !d.After(to); d = d.AddDate(0, 0, 1) {
		out = append(out, d.Format(UsageDayLayout))
	}
	return out
}

// UsageDay is the start (UTC) of t's day.
func UsageDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// SortUsage orders rows as UsageReader returns them.
func SortUsage(rows []UsageRow) {
	key := func(r UsageRow) string {
		return r.Day + "\x00" + r.Producer + "\x00" + classDigit(r.Class) + "\x00" + r.Country + "\x00" + r.Status
	}
	slices.SortFunc(rows, func(a, b UsageRow) int { return strings.Compare(key(a), key(b)) })
}
