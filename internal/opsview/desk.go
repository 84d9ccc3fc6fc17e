package opsview

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"smsgw/internal/admission"
	"smsgw/internal/config"
	"smsgw/internal/history"
	"smsgw/internal/limiter"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
	"smsgw/internal/state"
)

// Desk is what operators read and do, behind the admin API: the operator
// pause (its methods promoted from OperatorPause), the stats answer, the
// send history and the suppression list. It knows no HTTP: the API
// (httpapi.Operations) turns its answers and errors into answers.
type Desk struct {
	*admission.OperatorPause
	Cfg     config.Config
	Now     func() time.Time
	Metrics *APIMetrics // the delivery ratio of recent receipts
	Limiter limiter.Limiter
	Live    *LiveStats
	Hist    *HistoryView
	Queue   queue.Queue
	Outbox  queue.Outbox // the callback outbox; nil: none
	Protect *admission.Protector
}

// The sections of the stats answer that come from the store (Redis, or
// the embedded store) and are left out, and named in unavailable, when it
// cannot be read. What each needs:
//
//   - classes: the counters (the *_total figures) and the queue (depths,
//     dead letters, oldest age); the queue is read only after the counters;
//   - counters: the counters (their scope and since);
//   - callbacks: the callback outbox;
//   - protection: the counters (refusals) and the suppression list's size.
//
// The sender lanes are this replica's and always answered; their backlog
// and oldest_seconds are the queue's, left out when it cannot be read.
//
// The counters also carry provider.sent_per_second, provider.throttled_total
// and otp.unavailable_total, absent with them. The limiter, the pause, OTP
// latency, the guard's window, the provider's settings and the replica are
// this process's and always answered.
const (
	SectionClasses    = "classes"
	SectionCounters   = "counters"
	SectionCallbacks  = "callbacks"
	SectionProtection = "protection"
)

// sharedReads is what one stats answer read from the store; an err is the
// reason its figures are missing.
type sharedReads struct {
	tot            Totals
	since          time.Time
	totErr         error
	queue          map[sms.Class]queue.ClassStats
	queueErr       error // nil and queue unread when totErr is set
	outbox         queue.OutboxStats
	outboxErr      error
	suppressions   int
	suppressionErr error
	lanes          []queue.LaneStats
	lanesErr       error
}

// readShared reads the store's figures concurrently. With Redis they share
// one deadline of redis.timeout: a Redis that does not answer costs the
// answer one timeout, not one (with go-redis's retries, several) per read.
// The embedded store is this process's file; its reads are not bounded.
func (d *Desk) readShared(ctx context.Context) sharedReads {
	if d.Cfg.Redis.Enabled() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.Cfg.Redis.Timeout)
		defer cancel()
	}
	var out sharedReads
	var wg sync.WaitGroup
	wg.Go(func() {
		// Counters before the queue: the dispatcher counts an outcome only
		// after the store recorded it, so every outcome counted here is
		// already in the queue figures read next. Read the other way round,
		// a dead letter ended between the two reads was counted but still
		// shown leased. Without the counters there are no classes to show,
		// so the queue is not read.
		if out.tot, _, out.since, out.totErr = d.Live.Totals.Read(ctx); out.totErr != nil {
			return
		}
		if out.queue, out.queueErr = d.Queue.Stats(ctx); out.queueErr != nil {
			out.queueErr = fmt.Errorf("queue stats: %w", out.queueErr)
		}
	})
	wg.Go(func() {
		if out.outbox, out.outboxErr = d.Outbox.OutboxStats(ctx); out.outboxErr != nil {
			out.outboxErr = fmt.Errorf("outbox stats: %w", out.outboxErr)
		}
	})
	wg.Go(func() {
		if out.suppressions, out.suppressionErr = d.Protect.Sup.Count(ctx); out.suppressionErr != nil {
			out.suppressionErr = fmt.Errorf("suppressions: %w", out.suppressionErr)
		}
	})
	if lq, ok := d.Queue.(queue.LaneReader); ok {
		wg.Go(func() {
			if out.lanes, out.lanesErr = lq.Lanes(ctx); out.lanesErr != nil {
				out.lanesErr = fmt.Errorf("sender lanes: %w", out.lanesErr)
			}
		})
	}
	wg.Wait()
	return out
}

// Stats is what this replica could read: the sections the store answered
// for and the names of the others in Unavailable, so that during an outage
// the operator still sees the limiter, the pause, OTP latency and the
// provider from this replica; missing is why (the store's errors: addresses,
// timeouts, never a number, a body or a key). It fails only when the
// limiter does (it answers from its local fallback when Redis does not, so
// only when ctx ended).
func (d *Desk) Stats(ctx context.Context) (out StatsResponse, missing, err error) {
	// The limiter runs beside the store's reads, not after them.
	var (
		ls    limiter.State
		lsErr error
		wg    sync.WaitGroup
	)
	wg.Go(func() { ls, lsErr = d.Limiter.State(ctx) })
	var lanes []SenderLane
	wg.Go(func() { lanes = d.Live.SenderLanes(ctx) })
	sh := d.readShared(ctx)
	wg.Wait()
	if lsErr != nil {
		return StatsResponse{}, nil, fmt.Errorf("limiter state: %w", lsErr)
	}

	out = StatsResponse{Unavailable: []string{}, Pause: d.State(), SenderLanes: lanes}
	var failed []error
	miss := func(section string, errs ...error) {
		out.Unavailable = append(out.Unavailable, section)
		for _, err := range errs {
			if err != nil {
				failed = append(failed, fmt.Errorf("%s: %w", section, err))
			}
		}
	}
	tot, counted := sh.tot, sh.totErr == nil
	switch {
	case counted && sh.queueErr == nil:
		out.Classes = map[string]ClassStats{}
		for _, c := range sms.Classes {
			st, t := sh.queue[c], tot.Classes[c]
			out.Classes[c.String()] = ClassStats{Ready: st.Ready, Scheduled: st.Scheduled, Leased: st.Leased,
				Dead: st.Dead, OldestAgeSeconds: st.OldestAge.Seconds(),
				SentTotal: t.Sent, FailedTotal: t.Failed, ExpiredTotal: t.Expired, DeadTotal: t.Dead,
				DeliveryRatio: d.Metrics.Receipts.RecentRatio(c)}
		}
	case counted:
		miss(SectionClasses, sh.queueErr)
	default:
		miss(SectionClasses) // its reason is the counters', logged once below
	}
	if counted {
		out.Counters = &CountersInfo{Scope: d.Live.Totals.Scope, Since: sh.since.UTC()}
	} else {
		miss(SectionCounters, sh.totErr)
	}
	if sh.outboxErr == nil {
		out.Callbacks = &CallbackStats{Backlog: sh.outbox.Backlog, Dead: sh.outbox.Dead, OldestAgeSeconds: sh.outbox.OldestAge.Seconds()}
	} else {
		miss(SectionCallbacks, sh.outboxErr)
	}
	if counted && sh.suppressionErr == nil {
		out.Protection = protectionOf(tot, sh.suppressions)
	} else {
		miss(SectionProtection, sh.suppressionErr)
	}
	if sh.lanesErr == nil {
		withBacklog(out.SenderLanes, sh.lanes, d.Cfg.SenderRates())
	} else {
		failed = append(failed, sh.lanesErr)
	}

	snap := d.Live.Snap()
	g := d.Cfg.Dispatch.SuspensionGuard
	out.Provider = ProviderStats{Name: d.Live.ProviderName, RateScope: d.Live.Totals.Scope,
		TargetRPS: d.Cfg.Limits.TargetRPS, ContractRPS: d.Cfg.Provider.ContractRPS,
		ThrottledInWindow: snap.GuardCount, GuardActivateAt: snap.GuardActivateAt,
		SuspendAfter: g.Threshold, WindowSeconds: g.Window.Seconds(), GuardActive: snap.GuardActive}
	out.OTP = OTPStats{ReplicaUnavailableTotal: snap.SendNow.Refused()}
	if counted {
		// The rate is sampled from the stored totals: while they cannot be
		// read it is the rate from before, not a current figure.
		rate := d.Live.Totals.Rate()
		out.Provider.SentPerSecond, out.Provider.ThrottledTotal = &rate, &tot.Throttled
		out.OTP.UnavailableTotal = &tot.OTPRefused
	}
	if q, n := d.Live.OTP.Quantiles(0.5, 0.99); n > 0 {
		p50, p99 := ms(q[0]), ms(q[1])
		out.OTP.LatencyP50MS, out.OTP.LatencyP99MS, out.OTP.LatencySamples = &p50, &p99, n
	}
	rep := d.Live.Replica
	out.Replica = ReplicaStats{Owner: rep.Owner, StartedAt: rep.Started.UTC(), UptimeSeconds: d.Now().Sub(rep.Started).Seconds(),
		Mode: rep.Mode, LimiterMode: string(ls.Mode)}
	out.Limiter = LimiterStats{Mode: string(ls.Mode), PauseRemainingMS: ls.PauseRemaining.Milliseconds(), Keys: []LimiterKey{}}
	for _, k := range ls.Keys {
		out.Limiter.Keys = append(out.Limiter.Keys, LimiterKey{Name: k.Name, AheadMS: k.Ahead.Milliseconds(),
			RatePerSecond: k.Rate.PerSecond, Burst: k.Rate.Burst})
	}
	return out, errors.Join(failed...), nil
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// protectionOf is the stats answer's protection part: the refusals
// counted in tot and the suppression list's size.
func protectionOf(tot Totals, suppressions int) *ProtectionStats {
	out := &ProtectionStats{Refused: map[string]int64{}, Suppressions: suppressions}
	for r := range admission.NRefusals {
		out.Refused[r.String()] = tot.Refused[r]
	}
	return out
}

// History is the last 15 minutes of send figures for the ops page, from
// internal/history (a ring in this process when embedded; the account's
// shared steps in Redis, which every replica adds to), with the limits to
// draw them against and how long the backlog takes to drain at the
// current pace. An error is the history store's: it did not answer.
func (d *Desk) History(ctx context.Context) (HistoryResponse, error) {
	now, err := d.Hist.Store.Now(ctx)
	var series history.Series
	if err == nil {
		series, err = d.Hist.Store.Read(ctx, now)
	}
	if err != nil {
		return HistoryResponse{}, err
	}
	n := len(series.Samples)
	out := HistoryResponse{Scope: d.Hist.Scope, StepSeconds: series.Step.Seconds(),
		Start: series.Start.UTC(), End: series.End().UTC(), Throttled: make([]int64, n),
		Sent: map[string][]int64{}, Accepted: map[string][]int64{}, Queued: map[string][]*int64{},
		Limits: HistoryLimits{ContractRPS: d.Cfg.Provider.ContractRPS, TargetRPS: d.Cfg.Limits.TargetRPS,
			ClassMaxRPS: map[string]float64{}}}
	for name, cl := range d.Cfg.Limits.Classes {
		out.Limits.ClassMaxRPS[name] = cl.MaxRPS
	}
	for _, cl := range sms.Classes {
		name := cl.String()
		sent, acc, queued := make([]int64, n), make([]int64, n), make([]*int64, n)
		for i, smp := range series.Samples {
			sent[i], acc[i] = smp.Sent[cl], smp.Accepted[cl]
			if smp.HasQueued {
				queued[i] = &smp.Queued[cl]
			}
		}
		out.Sent[name], out.Accepted[name], out.Queued[name] = sent, acc, queued
	}
	for i, smp := range series.Samples {
		out.Throttled[i] = smp.Throttled
	}
	if total, byClass, known := series.Pace(int(drainOver / series.Step)); known {
		out.Drain = &DrainStats{OverSeconds: drainOver.Seconds(), Total: paceOf(total), ByClass: map[string]PaceStats{}}
		for _, cl := range sms.Classes {
			out.Drain.ByClass[cl.String()] = paceOf(byClass[cl])
		}
	}
	return out, nil
}

// drainOver is how far back the current pace is measured.
const drainOver = time.Minute

func paceOf(p history.Pace) PaceStats {
	out := PaceStats{Backlog: p.Backlog, SendRate: p.SendRate, ArrivalRate: p.ArrivalRate}
	if d, ok := p.Drain(); ok {
		secs := d.Seconds()
		out.DrainSeconds = &secs
	}
	return out
}

// Suppressions is the suppression list operators read and edit.
func (d *Desk) Suppressions() state.Suppressions { return d.Protect.Sup }

// SuppressionID is the id of number e164 under the account's key; the
// error is a Rejection (the list is unavailable).
func (d *Desk) SuppressionID(ctx context.Context, e164 string) (string, error) {
	key, err := d.Protect.NumberKey(ctx, false)
	if err != nil {
		return "", admission.SuppressionsUnavailable(err)
	}
	return admission.NumberID(key, e164), nil
}
