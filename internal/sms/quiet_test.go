package sms

import (
	"testing"
	"time"
)

func TestParseClock(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Clock
		ok   bool
	}{
		{"00:00", 0, true}, {"08:00", 480, true}, {"21:30", 1290, true}, {"23:59", 1439, true},
		{"24:00", 0, false}, {"12:60", 0, false}, {"8:00", 0, false}, {"08:00:00", 0, false},
		{"0800", 0, false}, {"", 0, false}, {"ab:cd", 0, false}, {"-1:00", 0, false},
	} {
		got, err := ParseClock(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseClock(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok && got.String() != tc.in {
			t.Errorf("Clock(%d).String() = %q, want %q", got, got.String(), tc.in)
		}
	}
	if _, err := NewQuietHours("21:00", "21:00"); err == nil {
		t.Error("an empty window was accepted")
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	l, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestQuietHoursHold is the hold of a marketing message as a table: the
// number's zones from its prefix, a local time, and when it may go.
func TestQuietHoursHold(t *testing.T) {
	tokyo, boise, la := mustZone(t, "Asia/Tokyo"), mustZone(t, "America/Boise"), mustZone(t, "America/Los_Angeles")
	night := QuietPolicy{ClassMarketing: {From: 21 * 60, To: 8 * 60}}
	noon := QuietPolicy{ClassMarketing: {From: 12 * 60, To: 14 * 60}}
	const jp, idaho = "+819012345678", "+12085551234" // Asia/Tokyo; America/Boise and America/Los_Angeles
	for _, tc := range []struct {
		name  string
		p     QuietPolicy
		class Class
		to    string
		at    time.Time
		want  time.Time // zero: not held
	}{
		{"before the window", night, ClassMarketing, jp, time.Date(2025, 1, 15, 20, 59, 0, 0, tokyo), time.Time{}},
		{"window starts", night, ClassMarketing, jp, time.Date(2025, 1, 15, 21, 0, 0, 0, tokyo), time.Date(2025, 1, 16, 8, 0, 0, 0, tokyo)},
		{"after midnight", night, ClassMarketing, jp, time.Date(2025, 1, 16, 3, 0, 0, 0, tokyo), time.Date(2025, 1, 16, 8, 0, 0, 0, tokyo)},
		{"last minute", night, ClassMarketing, jp, time.Date(2025, 1, 16, 7, 59, 59, 0, tokyo), time.Date(2025, 1, 16, 8, 0, 0, 0, tokyo)},
		{"window ends", night, ClassMarketing, jp, time.Date(2025, 1, 16, 8, 0, 0, 0, tokyo), time.Time{}},
		{"daytime window", noon, ClassMarketing, jp, time.Date(2025, 1, 15, 13, 0, 0, 0, tokyo), time.Date(2025, 1, 15, 14, 0, 0, 0, tokyo)},
		{"outside a daytime window", noon, ClassMarketing, jp, time.Date(2025, 1, 15, 22, 0, 0, 0, tokyo), time.Time{}},
		{"transactional exempt", night, ClassTransactional, jp, time.Date(2025, 1, 15, 23, 0, 0, 0, tokyo), time.Time{}},
		{"otp never held", QuietPolicy{ClassOTP: {From: 21 * 60, To: 8 * 60}}, ClassOTP, jp, time.Date(2025, 1, 15, 23, 0, 0, 0, tokyo), time.Time{}},
		// Idaho's 208 spans Mountain (Boise) and Pacific time: held until
		// it is 08:00 in Los Angeles, an hour after Boise's morning.
		{"two zones, one still night", night, ClassMarketing, idaho, time.Date(2025, 1, 15, 7, 30, 0, 0, boise), time.Date(2025, 1, 15, 8, 0, 0, 0, la)},
		{"two zones, evening in one", night, ClassMarketing, idaho, time.Date(2025, 1, 15, 20, 30, 0, 0, la), time.Date(2025, 1, 16, 8, 0, 0, 0, la)},
		{"two zones, day in both", night, ClassMarketing, idaho, time.Date(2025, 1, 15, 12, 0, 0, 0, la), time.Time{}},
		{"unknown zone", night, ClassMarketing, "+882345678901", time.Date(2025, 1, 15, 23, 0, 0, 0, time.UTC), time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.p.Hold(&Message{Class: tc.class, To: tc.to}, tc.at)
			if !got.Equal(tc.want) {
				t.Errorf("Hold at %v = %v, want %v", tc.at, got, tc.want)
			}
		})
	}
}

// TestQuietHoursNoCommonDay: a North American toll-free number spans
// Guam to Hawaii, more than the day a 21:00–08:00 window leaves; the hold
// ends at the earliest instant allowed in the most zones, which is day in
// more of them than the instant it was asked at.
func TestQuietHoursNoCommonDay(t *testing.T) {
	q := QuietHours{From: 21 * 60, To: 8 * 60}
	zones := TimeZones("+18005551234")
	if len(zones) < 10 {
		t.Fatalf("toll-free zones: %d", len(zones))
	}
	at := time.Date(2025, 1, 15, 4, 0, 0, 0, time.UTC) // night on the US mainland
	until := q.Until(zones, at)
	if until.IsZero() || !until.After(at) {
		t.Fatalf("Until = %v, want a hold", until)
	}
	if got, was := q.allowedIn(zones, until), q.allowedIn(zones, at); got <= was {
		t.Errorf("allowed in %d zones at %v, %d at %v: the hold gained nothing", got, until, was, at)
	}
	for t2 := at; t2.Before(at.Add(holdHorizon)); t2 = t2.Add(time.Minute) {
		if q.allowedIn(zones, t2) > q.allowedIn(zones, until) {
			t.Fatalf("%v is allowed in more zones than the chosen %v", t2, until)
		}
		if t2.Before(until) && q.allowedIn(zones, t2) == q.allowedIn(zones, until) {
			t.Fatalf("%v is allowed in as many zones as %v and earlier", t2, until)
		}
	}
}

func TestStatusAt(t *testing.T) {
	now := time.Date(2025, 1, 15, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		stored Status
		sendAt time.Time
		want   Status
	}{
		{StatusQueued, now.Add(time.Minute), StatusScheduled},
		{StatusQueued, now, StatusQueued},
		{StatusQueued, time.Time{}, StatusQueued},
		{StatusSending, now.Add(time.Minute), StatusSending},
		{StatusSent, now.Add(time.Minute), StatusSent},
	} {
		m := &Message{Status: tc.stored, SendAt: tc.sendAt}
		if got := m.StatusAt(now); got != tc.want {
			t.Errorf("stored %s, send_at %v: StatusAt = %s, want %s", tc.stored, tc.sendAt, got, tc.want)
		}
	}
}

// untilByScan is what Until must answer, found the slow way: every minute
// after at (a window's edges and a clock's changes all fall on whole
// minutes) within holdHorizon, the earliest at which the most zones are
// allowed; zero when no minute has more zones allowed than at itself.
func untilByScan(q QuietHours, zones []*time.Location, at time.Time) time.Time {
	best, most := time.Time{}, q.allowedIn(zones, at)
	for t := at.Truncate(time.Minute).Add(time.Minute); !t.After(at.Add(holdHorizon)); t = t.Add(time.Minute) {
		if n := q.allowedIn(zones, t); n > most {
			best, most = t, n
		}
	}
	return best
}

// TestQuietHoursAcrossClockChanges holds Until to the scan on the days a
// clock is set forward or back, with windows ending just before, inside
// and just after the hour it skips or repeats. Before ends looked for
// every instant reading To, a window ending at 00:00 in Santiago on the
// day its clock skips midnight, or at 01:30 in New York on the day 01:30
// comes twice, held a message a whole day longer; one ending at 02:30 in
// Berlin, where the clock jumps from 02:00 to 03:00, held it until 03:30.
func TestQuietHoursAcrossClockChanges(t *testing.T) {
	t.Parallel()
	names := []string{"America/New_York", "Europe/Berlin", "America/Santiago", "Africa/Cairo", "America/Havana",
		"Asia/Beirut", "Australia/Lord_Howe", "Pacific/Chatham", "Europe/London", "Asia/Tokyo"}
	var windows []QuietHours
	for _, from := range []Clock{21 * 60, 23*60 + 30} {
		for _, to := range []Clock{0, 30, 60, 90, 120, 150, 165, 180, 195, 8 * 60} {
			windows = append(windows, QuietHours{From: from, To: to})
		}
	}
	windows = append(windows, QuietHours{From: 30, To: 150}, QuietHours{From: 150, To: 8 * 60})
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			z := mustZone(t, name)
			zones := []*time.Location{z}
			// The clock changes of 2025 (none in Tokyo: the control).
			changes := offsetChanges(z, time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			if len(changes) == 0 {
				changes = []time.Time{time.Date(2025, 3, 30, 1, 0, 0, 0, time.UTC)}
			}
			for _, change := range changes {
				for _, q := range windows {
					for at := change.Add(-26 * time.Hour); at.Before(change.Add(4 * time.Hour)); at = at.Add(47*time.Minute + 13*time.Second) {
						if got, want := q.Until(zones, at), untilByScan(q, zones, at); !got.Equal(want) {
							t.Fatalf("window %v–%v, at %v: Until = %v, want %v", q.From, q.To, at.In(z), got.In(z), want.In(z))
						}
					}
				}
			}
		})
	}
	// Several zones: Idaho's Mountain and Pacific time on the nights
	// their clocks are set forward and back.
	idaho := TimeZones("+12085551234")
	for _, change := range []time.Time{time.Date(2025, 3, 9, 9, 0, 0, 0, time.UTC), time.Date(2025, 11, 2, 8, 0, 0, 0, time.UTC)} {
		for _, q := range []QuietHours{{From: 21 * 60, To: 8 * 60}, {From: 22 * 60, To: 90}, {From: 23 * 60, To: 150}} {
			for at := change.Add(-26 * time.Hour); at.Before(change.Add(4 * time.Hour)); at = at.Add(61 * time.Minute) {
				if got, want := q.Until(idaho, at), untilByScan(q, idaho, at); !got.Equal(want) {
					t.Fatalf("Idaho, window %v–%v, at %v: Until = %v, want %v", q.From, q.To, at, got, want)
				}
			}
		}
	}
}

// FuzzQuietHoursUntil holds Until to the scan for any window, instant and
// one or two zones among those whose clocks change at awkward times.
func FuzzQuietHoursUntil(f *testing.F) {
	names := []string{"America/New_York", "Europe/Berlin", "America/Santiago", "Africa/Cairo", "America/Havana",
		"Asia/Beirut", "Australia/Lord_Howe", "Pacific/Chatham", "Europe/London", "Asia/Tokyo",
		"America/Los_Angeles", "Pacific/Kiritimati", "Pacific/Pago_Pago", "Asia/Kolkata", "America/St_Johns"}
	zones := make([]*time.Location, len(names))
	for i, n := range names {
		l, err := time.LoadLocation(n)
		if err != nil {
			f.Fatal(err)
		}
		zones[i] = l
	}
	f.Add(uint16(21*60), uint16(8*60), int64(1741500000), uint8(0), uint8(0))
	f.Add(uint16(21*60), uint16(0), int64(1757214000), uint8(2), uint8(2))
	f.Add(uint16(22*60), uint16(90), int64(1762063800), uint8(0), uint8(10))
	f.Add(uint16(21*60), uint16(150), int64(1743290000), uint8(1), uint8(11))
	f.Fuzz(func(t *testing.T, from, to uint16, unix int64, z1, z2 uint8) {
		q := QuietHours{From: Clock(from % 1440), To: Clock(to % 1440)}
		if q.From == q.To {
			return // NewQuietHours refuses it
		}
		// 2000 to 2100: the zones' rules, past and projected.
		at := time.Unix(946684800+((unix%3155760000)+3155760000)%3155760000, 0)
		zs := []*time.Location{zones[int(z1)%len(zones)]}
		if z2 != z1 {
			zs = append(zs, zones[int(z2)%len(zones)])
		}
		if got, want := q.Until(zs, at), untilByScan(q, zs, at); !got.Equal(want) {
			t.Fatalf("window %v–%v, zones %v, at %v: Until = %v, want %v", q.From, q.To, zs, at.UTC(), got.UTC(), want.UTC())
		}
	})
}
