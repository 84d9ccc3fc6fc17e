package admission

// The estimate behind estimated_send_at and the TTL admission check.
//
// A message goes when the work ahead of it has been sent. The work is
// counted in units of provider rate (a message of k segments is k units
// when the provider counts segments), from three sources:
//
//   - the stored backlog (ready + in flight per class), read at most every
//     etaRefresh and shared by all requests in between, so that admission
//     does not cost a store round trip per request;
//   - what this replica accepted since that read began, which the read
//     cannot hold yet (a 1,000-message batch is ahead of the next request
//     at once, not 250 ms later);
//   - for a message due later (send_at, quiet hours), what falls due before
//     it, read from the queue with that request (queue.ScheduledWithin).
//
// The stored backlog is a count of messages; it becomes units through the
// mean cost of the messages this replica accepted in that class.
//
// The model is a fluid one: from now (after any pause) the provider takes
// target_rps units a second, the classes above first, the message's own
// class at its cap; scheduled work joins when it falls due. The estimate is
// when the work ahead at the message's due time has drained at those rates.
// Work arriving later in a class above (an OTP burst) is not foreseen; the
// suspension guard's slowdown is.
//
// A sender with a limit of its own (limits.senders) also has its lane: a
// message of that sender goes no sooner than the work queued ahead of it
// in its lane (its sender's messages of its class and those above,
// scheduled ones included, so it errs late) has gone at the sender's
// max_rps, after the lane's hold; the estimate is the later of the two.

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"smsgw/internal/config"
	"smsgw/internal/limiter"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// ETARefresh is how often the ETA estimator reads the backlog again.
const ETARefresh = 250 * time.Millisecond

// costWeight is how much each accepted message moves a class's mean cost.
const costWeight = 0.02

// ETAEstimator turns the backlog into a send time.
type ETAEstimator struct {
	Q        queue.Queue
	Lim      limiter.Limiter
	Pause    *OperatorPause
	Cfg      config.Config
	Now      func() time.Time
	Log      *slog.Logger
	Refresh  time.Duration
	Quiet    sms.QuietPolicy
	Slowdown func() int // the dispatcher's current guard slowdown; nil: none

	mu         sync.Mutex
	at         time.Time
	ahead      [NumClasses]int64 // ready + leased per class, as last read
	limitPause time.Duration
	busy       bool
	pending    [NumClasses]float64 // units due now accepted here since the read in progress began
	counted    [NumClasses]float64 // pending when that read began: the read holds them
	cost       [NumClasses]float64 // mean units per accepted message; 0: none seen (1)
	// The lanes of the senders of limits.senders, as last read: queued
	// per class, and how long each is held from that read; with what this
	// replica accepted since (as pending and counted above).
	lanes       map[string][NumClasses]int64
	laneHeld    map[string]time.Time
	lanePending map[string][NumClasses]float64
	laneCounted map[string][NumClasses]float64
}

// etaState is what an estimate starts from.
type etaState struct {
	ahead  [NumClasses]float64            // units ready or in flight now
	cost   [NumClasses]float64            // units per stored message
	pause  time.Duration                  // nothing is sent before now+pause
	target float64                        // units/s the provider takes in all
	pace   [NumClasses]float64            // units/s of each class alone
	lane   map[string][NumClasses]float64 // units queued per configured sender and class
	held   map[string]time.Duration       // a configured sender's lane held from now
}

// arrival is work falling due later: at, after now.
type arrival struct {
	at    time.Duration
	class sms.Class
	units float64
}

// state returns the backlog, refreshing the stored part when stale. On a
// store error the last known numbers are used.
func (e *ETAEstimator) state(ctx context.Context) etaState {
	e.mu.Lock()
	now := e.Now()
	if now.Sub(e.at) >= e.Refresh && !e.busy {
		e.busy = true
		e.counted = e.pending
		e.laneCounted = maps.Clone(e.lanePending)
		e.mu.Unlock()
		e.read(ctx, now)
		e.mu.Lock()
	}
	defer e.mu.Unlock()
	st := etaState{pause: e.limitPause + e.Pause.remaining(now)}
	slow := 1.0
	if e.Slowdown != nil {
		slow = float64(max(e.Slowdown(), 1))
	}
	st.target = e.Cfg.Limits.TargetRPS / slow
	for c := range NumClasses {
		st.cost[c] = max(e.cost[c], 1)
		st.ahead[c] = float64(e.ahead[c])*st.cost[c] + e.pending[c]
		st.pace[c] = e.pace(sms.Class(c)) / slow
	}
	st.lane, st.held = map[string][NumClasses]float64{}, map[string]time.Duration{}
	for s := range e.Cfg.Limits.Senders {
		n, p := e.lanes[s], e.lanePending[s]
		var units [NumClasses]float64
		for c := range NumClasses {
			units[c] = float64(n[c])*st.cost[c] + p[c]
		}
		st.lane[s], st.held[s] = units, max(e.laneHeld[s].Sub(now), 0)
	}
	return st
}

// readLanes reads the lanes of the senders of limits.senders: queued
// messages per class and when each lane's hold ends; nil without any or
// when the queue keeps no lanes.
func (e *ETAEstimator) readLanes(ctx context.Context, now time.Time) (map[string][NumClasses]int64, map[string]time.Time, error) {
	lr, ok := e.Q.(queue.LaneReader)
	if !ok || len(e.Cfg.Limits.Senders) == 0 {
		return nil, nil, nil
	}
	ls, err := lr.Lanes(ctx)
	if err != nil {
		return nil, nil, err
	}
	lanes, held := map[string][NumClasses]int64{}, map[string]time.Time{}
	for _, l := range ls {
		if _, ok := e.Cfg.Limits.Senders[l.Lane]; !ok {
			continue
		}
		var n [NumClasses]int64
		for c, q := range l.Queued {
			if c.Valid() {
				n[c] = q
			}
		}
		lanes[l.Lane], held[l.Lane] = n, now.Add(l.HeldFor)
	}
	return lanes, held, nil
}

// read refreshes the stored backlog; e.busy is set.
func (e *ETAEstimator) read(ctx context.Context, now time.Time) {
	var ahead [NumClasses]int64
	stats, err := e.Q.Stats(ctx)
	if err == nil {
		for c, st := range stats {
			if c.Valid() {
				ahead[c] = st.Ready + st.Leased
			}
		}
	}
	var pause time.Duration
	if st, serr := e.Lim.State(ctx); serr == nil {
		pause = st.PauseRemaining
	}
	lanes, held, lerr := e.readLanes(ctx, now)
	if lerr != nil {
		e.Log.WarnContext(ctx, "eta: sender lanes failed; estimating by class alone", "err", lerr)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.busy = false
	if err != nil {
		e.Log.WarnContext(ctx, "eta: queue stats failed; using the last known backlog", "err", err)
		return
	}
	for c := range NumClasses {
		// What was pending when the read began is in the stored numbers
		// now; what arrived during it may be too: counting it twice only
		// makes the estimate later, never earlier.
		e.pending[c] = max(e.pending[c]-e.counted[c], 0)
	}
	for s, p := range e.lanePending {
		for c := range NumClasses {
			p[c] = max(p[c]-e.laneCounted[s][c], 0)
		}
		e.lanePending[s] = p
	}
	e.ahead, e.limitPause, e.at = ahead, pause, now
	e.lanes, e.laneHeld = lanes, held
}

// Accepted records messages this replica has just stored.
func (e *ETAEstimator) Accepted(now time.Time, ms ...*sms.Message) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range ms {
		c, units := m.Class, float64(max(m.Segments, 1))
		if e.cost[c] == 0 {
			e.cost[c] = units
		}
		e.cost[c] += costWeight * (units - e.cost[c])
		if !m.NotBefore.After(now) {
			e.pending[c] += units
		}
		if _, ok := e.Cfg.Limits.Senders[m.From]; ok {
			if e.lanePending == nil {
				e.lanePending = map[string][NumClasses]float64{}
			}
			p := e.lanePending[m.From]
			p[c] += units
			e.lanePending[m.From] = p
		}
	}
}

// pace is how many units of class c go per second when it has the
// provider to itself: the target rate, or the class cap below it.
func (e *ETAEstimator) pace(c sms.Class) float64 {
	pace := e.Cfg.Limits.TargetRPS
	if cl, ok := e.Cfg.Limits.Classes[c.String()]; ok && cl.MaxRPS > 0 && cl.MaxRPS < pace {
		pace = cl.MaxRPS
	}
	return pace
}

// Plan estimates when each of ms (stamped, in enqueue order) will be sent.
// Each counts the ones before it of the same or a higher class as ahead
// of it, unless keep says it will not be stored (keep may be nil). The
// estimate never falls inside the recipient's quiet hours.
func (e *ETAEstimator) Plan(ctx context.Context, now time.Time, ms []*sms.Message, keep func(i int, eta time.Time) bool) []time.Time {
	st := e.state(ctx)
	arrivals := e.scheduled(ctx, now, ms, st)
	out := make([]time.Time, len(ms))
	for i, m := range ms {
		d := max(m.NotBefore.Sub(now), 0)
		eta := now.Add(max(st.when(m.Class, d, arrivals), st.laneWhen(e.Cfg, m)))
		if hold := e.Quiet.Hold(m, eta); !hold.IsZero() {
			eta = hold
		}
		out[i] = eta
		if keep != nil && !keep(i, eta) {
			continue
		}
		units := float64(max(m.Segments, 1))
		if l, ok := st.lane[m.From]; ok {
			l[m.Class] += units
			st.lane[m.From] = l
		}
		if d == 0 {
			st.ahead[m.Class] += units
		} else {
			arrivals = insertArrival(arrivals, arrival{at: d, class: m.Class, units: units})
		}
	}
	return out
}

func insertArrival(as []arrival, a arrival) []arrival {
	i, _ := slices.BinarySearchFunc(as, a.at, func(x arrival, at time.Duration) int { return cmp.Compare(x.at, at) })
	// After every arrival at the same time: it was stored before.
	for i < len(as) && as[i].at == a.at {
		i++
	}
	return slices.Insert(as, i, a)
}

// scheduled reads the stored work falling due before the latest of ms, as
// arrivals in time order. Each due time is read exactly, with a coarser
// profile before it (at 1/16, 1/8, 1/4, 1/2 and 3/4 of it); work is placed
// at the end of its interval, so the estimate errs late.
func (e *ETAEstimator) scheduled(ctx context.Context, now time.Time, ms []*sms.Message, st etaState) []arrival {
	horizons := scheduleHorizons(now, ms)
	if len(horizons) == 0 {
		return nil
	}
	counts, err := e.Q.ScheduledWithin(ctx, horizons)
	if err != nil {
		e.Log.WarnContext(ctx, "eta: scheduled counts failed; estimating without them", "err", err)
		return nil
	}
	var out []arrival
	for _, c := range sms.Classes {
		prev := int64(0)
		for i, n := range counts[c] {
			if n > prev {
				at := max(horizons[i]-clockSkew, 0)
				out = append(out, arrival{at: at, class: c, units: float64(n-prev) * st.cost[c]})
			}
			prev = n
		}
	}
	slices.SortStableFunc(out, func(a, b arrival) int { return cmp.Compare(a.at, b.at) })
	return out
}

// clockSkew is how far the store's clock (Redis TIME) may be behind this
// process's: every horizon is read that much longer, so that a campaign
// due at the very instant of a message's send_at is ahead of it however
// the clocks differ. Work due in that margin after the message counts as
// ahead of it: the estimate errs late.
const clockSkew = time.Second

// profile is the fractions of a due time at which the work before it is read.
var profile = []float64{1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2, 3.0 / 4}

// scheduleHorizons lists the horizons to read for ms: every distinct due
// time after now (to the ms, rounded up) and, while there is room, the
// profile before it; at most queue.MaxHorizons, ascending. A due time left
// out is read at the next one kept, which counts more work, never less.
func scheduleHorizons(now time.Time, ms []*sms.Message) []time.Duration {
	var dues []time.Duration
	for _, m := range ms {
		if d := m.NotBefore.Sub(now); d > 0 {
			dues = append(dues, (d + time.Millisecond - 1).Truncate(time.Millisecond))
		}
	}
	slices.Sort(dues)
	dues = slices.Compact(dues)
	if len(dues) > queue.MaxHorizons {
		kept := make([]time.Duration, 0, queue.MaxHorizons)
		for i := 1; i <= queue.MaxHorizons; i++ {
			kept = append(kept, dues[i*len(dues)/queue.MaxHorizons-1])
		}
		dues = kept
	}
	out := slices.Clone(dues)
	for _, d := range dues {
		for _, f := range profile {
			if len(out) >= queue.MaxHorizons {
				break
			}
			out = append(out, time.Duration(float64(d)*f).Truncate(time.Millisecond))
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) > 0 && out[0] == 0 {
		out = out[1:]
	}
	for i := range out {
		out[i] += clockSkew
	}
	return out
}

// when returns how long after now a message of class c due d after now
// is sent, given the work ahead now and the arrivals (in time order).
func (st *etaState) when(c sms.Class, d time.Duration, arrivals []arrival) time.Duration {
	var hi float64
	for hc := range int(c) {
		hi += st.ahead[hc]
	}
	own, pace := st.ahead[c], st.pace[c]
	t := time.Duration(0)
	drain := func(to time.Duration) {
		if from := max(t, st.pause); to > from {
			secs := (to - from).Seconds()
			capacity := st.target * secs
			used := min(hi, capacity)
			hi -= used
			own -= min(own, pace*secs, capacity-used)
		}
		t = max(t, to)
	}
	for _, a := range arrivals {
		if a.at > d {
			break
		}
		drain(a.at)
		switch {
		case a.class < c:
			hi += a.units
		case a.class == c:
			own += a.units
		}
	}
	drain(d)
	wait := max(st.pause-d, 0) + time.Duration((hi/st.target+own/pace)*float64(time.Second))
	return d + wait
}

// laneWhen returns how long after now m's sender lane lets it go: after
// the lane's hold (and the pause), once the units of its sender queued
// in its class and the classes above have gone at the sender's max_rps;
// 0 for a sender without a limit of its own.
func (st *etaState) laneWhen(cfg config.Config, m *sms.Message) time.Duration {
	l, ok := st.lane[m.From]
	rate := cfg.Limits.Senders[m.From].MaxRPS
	if !ok || rate <= 0 {
		return 0
	}
	var units float64
	for c := range int(m.Class) + 1 {
		units += l[c]
	}
	return max(st.held[m.From], st.pause) + time.Duration(units/rate*float64(time.Second))
}

// AdmitTTL refuses a message that would expire before its turn. The retry
// hint is when the same request would be admitted if nothing else changed:
// the backlog ahead has drained enough (or the quiet hours are near their
// end) for the estimate to fall inside the TTL.
func AdmitTTL(m *sms.Message, eta time.Time, ttl time.Duration) error {
	if m.ExpiresAt.IsZero() || eta.Before(m.ExpiresAt) {
		return nil
	}
	eta = eta.UTC()
	return &Rejection{Kind: RejectExpires, RetryAfter: eta.Sub(m.ExpiresAt) + time.Millisecond,
		Detail: fmt.Sprintf("the message's turn would come at %s, past its TTL of %s; send it later or with a longer ttl_seconds",
			eta.Format(time.RFC3339), ttl),
		Extra: map[string]any{"estimated_send_at": eta.Format(time.RFC3339Nano), "ttl_seconds": int64(ttl / time.Second)}}
}

// NumClasses sizes per-class arrays: the classes are otp..marketing.
const NumClasses = int(sms.ClassMarketing) + 1
