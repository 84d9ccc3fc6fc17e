package redisq

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

var seqPrefix = regexp.MustCompile(`\{\d{16}:`)

// diff lists what changed between two dumps as "-key" / "+key" entries
// (values left out, ready sequence numbers masked), sorted.
func diff(before, after []string) []string {
	keyOf := func(line string) string {
		k, _, _ := strings.Cut(line, " = ")
		return seqPrefix.ReplaceAllString(k, "{SEQ:")
	}
	var out []string
	for _, l := range before {
		if !slices.Contains(after, l) {
			out = append(out, "-"+keyOf(l))
		}
	}
	for _, l := range after {
		if !slices.Contains(before, l) {
			out = append(out, "+"+keyOf(l))
		}
	}
	slices.Sort(out)
	return out
}

// leasedDiff is the diff of a Take that leased id of the class named
// class: out of the class's ready set, into its lease set and the leases.
func leasedDiff(class, id string) []string {
	return []string{"+lease:" + class + "{" + id + "}", "+leases[" + id + "]", "+msgs[" + id + "]",
		"-msgs[" + id + "]", "-ready:" + class + "{SEQ:" + id + "}"}
}

// TestTakeState seeds a state, calls Take and compares everything that
// changed in Redis with what the script's contract says may change.
func TestTakeState(t *testing.T) {
	t.Parallel()
	type seeded struct{ otp, mkt, sched *sms.Message }
	for _, tc := range []struct {
		name     string
		classes  []sms.Class
		wantID   func(s seeded) string // "" means ErrEmpty
		wantWait func(d time.Duration) bool
		wantDiff func(s seeded) []string
	}{
		{
			name:     "highest class first",
			wantID:   func(s seeded) string { return s.otp.ID },
			wantDiff: func(s seeded) []string { return leasedDiff("otp", s.otp.ID) },
		},
		{
			name:     "caller's class order",
			classes:  []sms.Class{sms.ClassMarketing, sms.ClassOTP},
			wantID:   func(s seeded) string { return s.mkt.ID },
			wantDiff: func(s seeded) []string { return leasedDiff("marketing", s.mkt.ID) },
		},
		{
			name:     "only a scheduled message",
			classes:  []sms.Class{sms.ClassTransactional},
			wantID:   func(seeded) string { return "" },
			wantWait: func(d time.Duration) bool { return d > 59*time.Minute && d <= time.Hour },
			wantDiff: func(seeded) []string { return nil },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := newShared(t)
			s := seeded{otp: msg("p", sms.ClassOTP), mkt: msg("p", sms.ClassMarketing), sched: msg("p", sms.ClassTransactional)}
			s.sched.NotBefore = time.Now().Add(time.Hour)
			enqueue(t, q, s.mkt, s.otp, s.sched)
			before := dump(t, q)
			l, wait, err := q.Take(t.Context(), queue.TakeOptions{Owner: "w1", Lease: time.Minute, Classes: tc.classes})
			after := dump(t, q)
			if want := tc.wantID(s); want == "" {
				if !errors.Is(err, queue.ErrEmpty) || !tc.wantWait(wait) {
					t.Fatalf("Take = %v, %v, %v: want ErrEmpty and about 1h", l, wait, err)
				}
			} else {
				if err != nil || l.Message.ID != want || l.Message.Status != sms.StatusSending {
					t.Fatalf("Take = %+v, %v: want %s sending", l, err, want)
				}
				var lease struct{ T, O, M, S string }
				if err := json.Unmarshal([]byte(q.c.HGet(t.Context(), q.k.leases(), want).Val()), &lease); err != nil {
					t.Fatalf("lease entry: %v", err)
				}
				if lease.T != l.Token || lease.O != "w1" || !strings.HasSuffix(lease.M, want) || lease.S == "" {
					t.Fatalf("lease entry %+v: want token %s, owner w1, member and score of %s", lease, l.Token, want)
				}
			}
			if got, want := diff(before, after), tc.wantDiff(s); !slices.Equal(got, want) {
				t.Fatalf("changed\n got %q\nwant %q", got, want)
			}
		})
	}
}

// TestStaleLeaseChangesNothing calls every ack with a lease that is not held
// and checks that Redis is left exactly as it was.
func TestStaleLeaseChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	scenarios := []struct {
		name  string
		stale func(t *testing.T, q *Queue) *queue.Leased
	}{
		{"wrong token", func(t *testing.T, q *Queue) *queue.Leased {
			l := *take(t, q, time.Hour)
			l.Token = newToken()
			return &l
		}},
		{"recovered", func(t *testing.T, q *Queue) *queue.Leased {
			l := take(t, q, 20*time.Millisecond)
			recoverOne(t, q)
			return l
		}},
		{"recovered and retaken", func(t *testing.T, q *Queue) *queue.Leased {
			l := take(t, q, 20*time.Millisecond)
			recoverOne(t, q)
			take(t, q, time.Hour)
			return l
		}},
		{"completed", func(t *testing.T, q *Queue) *queue.Leased {
			l := take(t, q, time.Hour)
			if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, Attempts: 1}); err != nil {
				t.Fatal(err)
			}
			return l
		}},
		{"dead", func(t *testing.T, q *Queue) *queue.Leased {
			l := take(t, q, time.Hour)
			if err := q.Dead(ctx, l, "x", 1); err != nil {
				t.Fatal(err)
			}
			return l
		}},
	}
	ops := map[string]func(q *Queue, l *queue.Leased) error{
		"Extend": func(q *Queue, l *queue.Leased) error { return q.Extend(ctx, l, time.Hour) },
		"Complete": func(q *Queue, l *queue.Leased) error {
			return q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, Attempts: 7})
		},
		"Requeue": func(q *Queue, l *queue.Leased) error {
			return q.Requeue(ctx, l, queue.RequeueOptions{SpendAttempt: true, LastError: "stale"})
		},
		"Dead": func(q *Queue, l *queue.Leased) error { return q.Dead(ctx, l, "stale", 7) },
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			q := newShared(t)
			enqueue(t, q, msg("p", sms.ClassOTP), msg("p", sms.ClassOTP))
			l := sc.stale(t, q)
			for name, op := range ops {
				before := dump(t, q)
				if err := op(q, l); !errors.Is(err, queue.ErrLeaseLost) {
					t.Fatalf("%s: %v, want ErrLeaseLost", name, err)
				}
				if d := diff(before, dump(t, q)); len(d) != 0 {
					t.Fatalf("%s with a stale lease changed %q", name, d)
				}
			}
		})
	}
}

// TestJSONRoundTrip: the scripts rewrite the record with Redis's cjson;
// every field must come back as Go wrote it, whatever the text, and every
// time to the ms (a not-before rounded up, never earlier).
func TestJSONRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newShared(t)
	m := msg("prod \"x\" / y", sms.ClassTransactional)
	m.Body = "Ünïcødé 日本語 😀 <b>&amp;</b> \"quoted\" back\\slash /slash\nnew line\ttab \u2028 \x01 end"
	m.From = "ACME/1"
	m.Reference = `{"nested":"json"}`
	m.IdempotencyKey = "key with spaces and {braces}"
	m.RequestHash = "sha256:abc"
	m.Segments = 3
	m.ExpiresAt = m.CreatedAt.Add(90 * time.Minute)
	m.NotBefore = time.Now().Add(-time.Second).UTC().Truncate(time.Millisecond).Add(time.Microsecond)
	enqueue(t, q, m)
	l := take(t, q, time.Hour)
	if err := q.Requeue(ctx, l, queue.RequeueOptions{SpendAttempt: true, LastError: "503 «busy»"}); err != nil {
		t.Fatal(err)
	}
	l = take(t, q, time.Hour)
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, ProviderID: "SM\"1\"", Attempts: 2}); err != nil {
		t.Fatal(err)
	}
	got, err := q.Get(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := *m
	want.Status, want.Attempts, want.ProviderID = sms.StatusSent, 2, "SM\"1\""
	want.LastError = "503 «busy»" // the retry's error, kept: Complete named none
	// A final record: no body or key, the number masked.
	want.Body, want.IdempotencyKey, want.NotBefore = "", "", time.Time{}
	want.To, want.Encoding = sms.MaskPhone(m.To), sms.UCS2
	want.UpdatedAt, want.SentAt = got.UpdatedAt, got.SentAt
	if !equalMessages(got, &want) {
		t.Fatalf("after the scripts\n got %+v\nwant %+v", got, &want)
	}
	if got.SentAt.IsZero() || got.SentAt.Before(m.CreatedAt) || got.SentAt.After(time.Now().Add(time.Second)) {
		t.Fatalf("SentAt %v, want between creation and now", got.SentAt)
	}
}

func equalMessages(a, b *sms.Message) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// TestLeaseOfChangedClass: a Leased whose message class was changed by the
// caller is refused and changes nothing (acting on the other class's keys
// would leave the real lease for Recover to hand out after delivery).
func TestLeaseOfChangedClass(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	q := newShared(t)
	enqueue(t, q, msg("p", sms.ClassOTP))
	l := take(t, q, time.Hour)
	bad := *l
	badMsg := *l.Message
	badMsg.Class = sms.ClassMarketing
	bad.Message = &badMsg
	before := dump(t, q)
	err := q.Complete(ctx, &bad, queue.Outcome{Status: sms.StatusSent, Attempts: 1})
	if err == nil || errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("Complete with a changed class: %v, want a class error", err)
	}
	if d := diff(before, dump(t, q)); len(d) != 0 {
		t.Fatalf("refused Complete changed %q", d)
	}
	if err := q.Complete(ctx, l, queue.Outcome{Status: sms.StatusSent, Attempts: 1}); err != nil {
		t.Fatalf("Complete with the lease as taken: %v", err)
	}
}
