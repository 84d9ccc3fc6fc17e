package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"smsgw/internal/admission"
	"smsgw/internal/limiter"
	"smsgw/internal/opsview"
	"smsgw/internal/queue"
	"smsgw/internal/sms"
)

// The sections of the stats answer that come from the store (Redis, or
// the embedded store) and are left out, and named in unavailable, when it
// cannot be read. What each needs:
//
//   - classes: the counters (the *_total figures) and the queue (depths,
//     dead letters, oldest age); the queue is read only after the counters;
//   - counters: the counters (their scope and since);
//   - callbacks: the callback outbox;
//   - protection: the counters (refusals) and the suppression list's size;
//   - sender_lanes: the queue's backlog per sender lane.
//
// The counters also carry provider.sent_per_second, provider.throttled_total
// and otp.unavailable_total, absent with them. The limiter, the pause, OTP
// latency, the guard's window, the provider's settings and the replica are
// this process's and always answered.
const (
	SectionClasses     = "classes"
	SectionCounters    = "counters"
	SectionCallbacks   = "callbacks"
	SectionProtection  = "protection"
	SectionSenderLanes = "sender_lanes"
)

// sharedReads is what one stats answer read from the store; an err is the
// reason its figures are missing.
type sharedReads struct {
	tot            opsview.Totals
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
func (s *Server) readShared(ctx context.Context) sharedReads {
	if s.Cfg.Redis.Enabled() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.Cfg.Redis.Timeout)
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
		if out.tot, _, out.since, out.totErr = s.Ops.Live.Totals.Read(ctx); out.totErr != nil {
			return
		}
		if out.queue, out.queueErr = s.Store.Queue.Stats(ctx); out.queueErr != nil {
			out.queueErr = fmt.Errorf("queue stats: %w", out.queueErr)
		}
	})
	wg.Go(func() {
		if out.outbox, out.outboxErr = s.Hooks.Callbacks.Outbox.OutboxStats(ctx); out.outboxErr != nil {
			out.outboxErr = fmt.Errorf("outbox stats: %w", out.outboxErr)
		}
	})
	wg.Go(func() {
		if out.suppressions, out.suppressionErr = s.Admit.Protect.Sup.Count(ctx); out.suppressionErr != nil {
			out.suppressionErr = fmt.Errorf("suppressions: %w", out.suppressionErr)
		}
	})
	if lq, ok := s.Store.Queue.(queue.LaneReader); ok {
		wg.Go(func() {
			if out.lanes, out.lanesErr = lq.Lanes(ctx); out.lanesErr != nil {
				out.lanesErr = fmt.Errorf("sender lanes: %w", out.lanesErr)
			}
		})
	}
	wg.Wait()
	return out
}

// adminStats answers what this replica could read: 200 with the sections
// the store answered for and the names of the others in unavailable, so
// that during an outage the operator still sees the limiter, the pause, OTP
// latency and the provider from this replica.
func (s *Server) adminStats(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	// The limiter answers from its local fallback when Redis does not
	// (within its own redis.timeout), so it runs beside the store's reads,
	// not after them; it fails only when the request itself ended.
	var (
		ls    limiter.State
		lsErr error
		wg    sync.WaitGroup
	)
	wg.Go(func() { ls, lsErr = s.Ops.Limiter.State(ctx) })
	sh := s.readShared(ctx)
	wg.Wait()
	if lsErr != nil {
		s.WriteError(w, r, fmt.Errorf("limiter state: %w", lsErr))
		return
	}

	out := opsview.StatsResponse{Unavailable: []string{}, Pause: s.Ops.Pause.State()}
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
		out.Classes = map[string]opsview.ClassStats{}
		for _, c := range sms.Classes {
			st, t := sh.queue[c], tot.Classes[c]
			out.Classes[c.String()] = opsview.ClassStats{Ready: st.Ready, Scheduled: st.Scheduled, Leased: st.Leased,
				Dead: st.Dead, OldestAgeSeconds: st.OldestAge.Seconds(),
				SentTotal: t.Sent, FailedTotal: t.Failed, ExpiredTotal: t.Expired, DeadTotal: t.Dead,
				DeliveryRatio: s.Metrics.Receipts.RecentRatio(c)}
		}
	case counted:
		miss(SectionClasses, sh.queueErr)
	default:
		miss(SectionClasses) // its reason is the counters', logged once below
	}
	if counted {
		out.Counters = &opsview.CountersInfo{Scope: s.Ops.Live.Totals.Scope, Since: sh.since.UTC()}
	} else {
		miss(SectionCounters, sh.totErr)
	}
	if sh.outboxErr == nil {
		out.Callbacks = &opsview.CallbackStats{Backlog: sh.outbox.Backlog, Dead: sh.outbox.Dead, OldestAgeSeconds: sh.outbox.OldestAge.Seconds()}
	} else {
		miss(SectionCallbacks, sh.outboxErr)
	}
	if counted && sh.suppressionErr == nil {
		out.Protection = protectionOf(tot, sh.suppressions)
	} else {
		miss(SectionProtection, sh.suppressionErr)
	}
	if sh.lanesErr == nil {
		out.SenderLanes = opsview.SenderLanes(sh.lanes, s.Cfg.SenderRates(), s.Now())
	} else {
		miss(SectionSenderLanes, sh.lanesErr)
	}

	snap := s.Ops.Live.Snap()
	g := s.Cfg.Dispatch.SuspensionGuard
	out.Provider = opsview.ProviderStats{Name: s.Ops.Live.ProviderName, RateScope: s.Ops.Live.Totals.Scope,
		TargetRPS: s.Cfg.Limits.TargetRPS, ContractRPS: s.Cfg.Provider.ContractRPS,
		ThrottledInWindow: snap.GuardCount, GuardActivateAt: snap.GuardActivateAt,
		SuspendAfter: g.Threshold, WindowSeconds: g.Window.Seconds(), GuardActive: snap.GuardActive}
	out.OTP = opsview.OTPStats{ReplicaUnavailableTotal: snap.SendNow.Refused()}
	if counted {
		// The rate is sampled from the stored totals: while they cannot be
		// read it is the rate from before, not a current figure.
		rate := s.Ops.Live.Totals.Rate()
		out.Provider.SentPerSecond, out.Provider.ThrottledTotal = &rate, &tot.Throttled
		out.OTP.UnavailableTotal = &tot.OTPRefused
	}
	if q, n := s.Ops.Live.OTP.Quantiles(0.5, 0.99); n > 0 {
		p50, p99 := ms(q[0]), ms(q[1])
		out.OTP.LatencyP50MS, out.OTP.LatencyP99MS, out.OTP.LatencySamples = &p50, &p99, n
	}
	rep := s.Ops.Live.Replica
	out.Replica = opsview.ReplicaStats{Owner: rep.Owner, StartedAt: rep.Started.UTC(), UptimeSeconds: s.Now().Sub(rep.Started).Seconds(),
		Mode: rep.Mode, LimiterMode: string(ls.Mode)}
	out.Limiter = opsview.LimiterStats{Mode: string(ls.Mode), PauseRemainingMS: ls.PauseRemaining.Milliseconds(), Keys: []opsview.LimiterKey{}}
	for _, k := range ls.Keys {
		out.Limiter.Keys = append(out.Limiter.Keys, opsview.LimiterKey{Name: k.Name, AheadMS: k.Ahead.Milliseconds(),
			RatePerSecond: k.Rate.PerSecond, Burst: k.Rate.Burst})
	}
	if len(out.Unavailable) > 0 && ctx.Err() == nil {
		// One line per answer; the errors are the store's (addresses,
		// timeouts), never a number, a body or a key.
		s.Log.WarnContext(ctx, "stats: answered without what the store could not give", "unavailable", out.Unavailable,
			"request_id", middleware.GetReqID(ctx), "err", errors.Join(failed...))
	}
	writeJSON(w, s.Log, "application/json", http.StatusOK, out)
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// adminGetMessage is any message's status, number masked: the operator
// looks a message up by id without learning the recipient.
func (s *Server) adminGetMessage(w http.ResponseWriter, r *http.Request) {
	if m, ok := s.lookup(w, r); ok {
		writeJSON(w, s.Log, "application/json", http.StatusOK, adminView(m, s.Now()))
	}
}

// maxPause bounds an operator pause with a duration.
const maxPause = 24 * time.Hour

// maxPauseReason bounds an operator pause's reason (logged, shown in the
// stats and on the dashboard).
const maxPauseReason = 200

// decodeOptional reads an optional JSON body into v; false when it
// answered the problem.
func (s *Server) decodeOptional(w http.ResponseWriter, r *http.Request, v any) bool {
	raw, err := readBody(r, true)
	if err == nil && raw != nil {
		err = decodeStrict(raw, v, "")
	}
	if err != nil {
		s.WriteError(w, r, err)
		return false
	}
	return true
}

func (s *Server) adminPause(w http.ResponseWriter, r *http.Request) {
	var req pauseRequest
	if !s.decodeOptional(w, r, &req) {
		return
	}
	var d time.Duration
	if req.DurationSeconds != nil {
		v := *req.DurationSeconds
		if !(v >= 1 && v <= maxPause.Seconds()) {
			s.WriteError(w, r, fieldError("duration_seconds", fmt.Sprintf("must be between 1 and %d", int(maxPause.Seconds()))))
			return
		}
		d = time.Duration(v * float64(time.Second))
	}
	if e := checkReason(req.Reason, maxPauseReason); e != nil {
		s.WriteError(w, r, e)
		return
	}
	sc, e := s.pauseScope(req.Class, req.Producer)
	if e != nil {
		s.WriteError(w, r, e)
		return
	}
	if sc != nil {
		if err := s.Ops.Pause.PauseScope(r.Context(), *sc, d, req.Reason); err != nil {
			s.WriteError(w, r, err)
			return
		}
		s.Log.WarnContext(r.Context(), "part of the sending paused by operator", "class", sc.Class, "producer", sc.Producer,
			"duration", d, "reason", req.Reason, "client_ip", clientIP(r.Context()))
		writeJSON(w, s.Log, "application/json", http.StatusOK, s.Ops.Pause.State())
		return
	}
	if err := s.Ops.Pause.Pause(r.Context(), d, req.Reason); err != nil {
		s.WriteError(w, r, err)
		return
	}
	s.Log.WarnContext(r.Context(), "sending paused by operator", "duration", d, "reason", req.Reason, "client_ip", clientIP(r.Context()))
	writeJSON(w, s.Log, "application/json", http.StatusOK, s.Ops.Pause.State())
}

// pauseScope is the scope a pause or resume names (nil: everything), or
// the problem naming the field: a class of the gateway's, or a producer of
// its configuration, not both.
func (s *Server) pauseScope(class, producer *string) (*admission.Scope, *apiError) {
	switch {
	case class != nil && producer != nil:
		return nil, fieldError("producer", "name a class or a producer, not both")
	case class != nil:
		c, err := sms.ParseClass(*class)
		if err != nil {
			return nil, fieldError("class", "must be otp, transactional or marketing")
		}
		return &admission.Scope{Class: c.String()}, nil
	case producer != nil:
		for _, p := range s.Cfg.Producers {
			if p.Name == *producer {
				return &admission.Scope{Producer: p.Name}, nil
			}
		}
		return nil, fieldError("producer", "must name a configured producer")
	}
	return nil, nil
}

func (s *Server) adminResume(w http.ResponseWriter, r *http.Request) {
	var req resumeRequest
	if !s.decodeOptional(w, r, &req) {
		return
	}
	sc, e := s.pauseScope(req.Class, req.Producer)
	if e != nil {
		s.WriteError(w, r, e)
		return
	}
	if sc != nil {
		if err := s.Ops.Pause.ResumeScope(r.Context(), *sc); err != nil {
			s.WriteError(w, r, err)
			return
		}
		s.Log.WarnContext(r.Context(), "part of the sending resumed by operator", "class", sc.Class, "producer", sc.Producer,
			"client_ip", clientIP(r.Context()))
		writeJSON(w, s.Log, "application/json", http.StatusOK, s.Ops.Pause.State())
		return
	}
	if err := s.Ops.Pause.Resume(r.Context()); err != nil {
		s.WriteError(w, r, err)
		return
	}
	s.Log.WarnContext(r.Context(), "sending resumed by operator", "client_ip", clientIP(r.Context()))
	writeJSON(w, s.Log, "application/json", http.StatusOK, s.Ops.Pause.State())
}

// AdminMessage is a message as an operator sees it: the recipient masked,
// the callback_url cut to its scheme and host, the producer named.
type AdminMessage struct {
	MessageView
	Producer string `json:"producer"`
}

func adminView(m *sms.Message, now time.Time) AdminMessage {
	v := viewOf(m, now)
	v.To = sms.MaskPhone(v.To)
	v.CallbackURL = callbackOrigin(v.CallbackURL)
	return AdminMessage{MessageView: v, Producer: m.Producer}
}

// callbackOrigin is what an operator sees of a callback_url: its scheme
// and host ("https://notify.example"), never its path or query, which may
// carry the producer's token (the producer's own GET shows it whole).
func callbackOrigin(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "" // not one the gateway accepts; show nothing rather than the text
	}
	return u.Scheme + "://" + u.Host
}

// DeadLettersResponse is the answer of GET /v1/admin/dead-letters.
type DeadLettersResponse struct {
	Messages []AdminMessage `json:"messages"`
}

const (
	defaultDeadLetters = 100
	maxDeadLetters     = 1000
)

// listLimit reads the limit query parameter of the admin lists (dead
// letters, dead callbacks): defaultDeadLetters when absent.
func listLimit(r *http.Request) (int, *apiError) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return defaultDeadLetters, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxDeadLetters {
		return 0, fieldError("limit", fmt.Sprintf("must be an integer between 1 and %d", maxDeadLetters))
	}
	return n, nil
}

// adminDeadLetters lists dead letters, oldest first, numbers masked: the
// operator needs the error and the producer, not the recipient.
func (s *Server) adminDeadLetters(w http.ResponseWriter, r *http.Request) {
	limit, perr := listLimit(r)
	if perr != nil {
		s.WriteError(w, r, perr)
		return
	}
	ms, err := s.Store.Queue.DeadLetters(r.Context(), limit)
	if err != nil {
		s.WriteError(w, r, fmt.Errorf("dead letters: %w", err))
		return
	}
	out := DeadLettersResponse{Messages: make([]AdminMessage, 0, len(ms))}
	for _, m := range ms {
		out.Messages = append(out.Messages, adminView(m, s.Now()))
	}
	writeJSON(w, s.Log, "application/json", http.StatusOK, out)
}

type retriedResponse struct {
	ID     string     `json:"id"`
	Status sms.Status `json:"status"`
}

func (s *Server) adminRetryDead(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if !sms.ValidID(id) {
		s.WriteError(w, r, errorf(KindNotFound, "no such dead letter"))
		return
	}
	if err := s.Store.Queue.RetryDead(r.Context(), id); err != nil {
		s.WriteError(w, r, fmt.Errorf("retry dead letter %s: %w", id, err))
		return
	}
	m, err := s.Store.Queue.Get(r.Context(), id)
	if err == nil {
		s.notify(m.Class)
	}
	w.Header().Set("Location", location(id))
	writeJSON(w, s.Log, "application/json", http.StatusAccepted, retriedResponse{ID: id, Status: sms.StatusQueued})
}
